/*
 * vblk: entry point. Parses the QEMU-style command line and runs the machine.
 * Exit status: 0 when the guest resets or powers off or the user quits,
 * 1 on a bad command line or a fatal VM error.
 */
#include <stdio.h>

#include "vblk/machine.h"
#include "vblk/options.h"
#ifdef VBLK_HAVE_VIRTIO_BLK_PCI
#include "vblk/virtio-blk-pci.h"
#endif

/* Context: main thread */
int main(int argc, char **argv)
{
    GError *err = NULL;
    VmmOptions *opts = options_parse(argc, argv, &err);
    int status;

    if (!opts) {
        fprintf(stderr, "vblk: %s\n", err->message);
        g_error_free(err);
        return 1;
    }
    if (opts->help || opts->version) {
        if (opts->help) {
            fputs(options_usage(), stdout);
        } else {
            printf("vblk version %s (QEMU-compatible command line)\n", VBLK_VERSION_STRING);
        }
        options_free(opts);
        return 0;
    }
    for (guint i = 0; i < opts->warnings->len; i++) {
        fprintf(stderr, "vblk: warning: %s\n", (char *)opts->warnings->pdata[i]);
    }
#ifdef VBLK_HAVE_VIRTIO_BLK_PCI
    /* Linked with src/virtio's device model: -device virtio-blk-pci is real. */
    virtio_blk_pci_register();
#endif
    status = machine_run(opts);
    options_free(opts);
    return status;
}
