/*
 * virtio-blk-pci device model: registers the "virtio-blk-pci" -device driver
 * with the machine. See src/devices/virtio-blk-pci.c.
 */
#ifndef VBLK_VIRTIO_BLK_PCI_H
#define VBLK_VIRTIO_BLK_PCI_H

typedef struct VirtIOBlkPCI VirtIOBlkPCI;

/* Context: main thread, before machine_run() */
void virtio_blk_pci_register(void);

#endif /* VBLK_VIRTIO_BLK_PCI_H */
