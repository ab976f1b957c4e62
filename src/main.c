/*
 * vblk: entry point. Parses the QEMU-style command line and runs the machine.
 * Exit status: 0 when the guest resets or powers off or the user quits,
 * 1 on a bad command line or a fatal VM error, 2 when the guest triple-faulted
 * under -no-reboot (docs/vmm.md).
 */
#include <stdio.h>

#include "vmm/machine.h"
#include "vmm/options.h"
#ifdef VBLK_HAVE_VIRTIO_BLK_PCI
#include "devices/virtio-blk-pci.h"
#include "util/error-report.h"
#endif

/* Context: main thread */
int main(int argc, char **argv)
{
    GError *err = NULL;
    VmmOptions *opts;
    int status;

    error_set_progname(argv[0]);
    machine_block_debug_signal(); /* before any thread: SIGUSR2 is the debug thread's */
    opts = options_parse(argc, argv, &err);

    if (!opts) {
        error_report("%s", err->message);
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
        warn_report("%s", (char *)opts->warnings->pdata[i]);
    }
#ifdef VBLK_HAVE_VIRTIO_BLK_PCI
    /* Linked with src/devices' device model: -device virtio-blk-pci is real. */
    virtio_blk_pci_register();
#endif
    status = machine_run(opts);
    options_free(opts);
    return status;
}
