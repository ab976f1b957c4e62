/* vblk: shared between options.c and options-devices.c; not a public interface. */
#ifndef VBLK_OPTIONS_INTERNAL_H
#define VBLK_OPTIONS_INTERNAL_H

#include "vmm/options.h"

/* Sets "-@name @arg: <message>" and returns false. */
bool opt_fail(GError **errp, const char *name, const char *arg, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);
/* Integer in [min, max], decimal or 0x-hex. */
bool opt_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

bool opt_drive(VmmOptions *o, const char *name, const char *arg, GError **errp);
bool opt_blockdev(VmmOptions *o, const char *name, const char *arg, GError **errp);
bool opt_device(VmmOptions *o, const char *name, const char *arg, GError **errp);
bool opt_object(VmmOptions *o, const char *name, const char *arg, GError **errp);
/* After all options: -device references, PCI slots, iothread ids. */
bool options_check_devices(VmmOptions *o, GError **errp);

void drive_options_free(gpointer p);
void device_options_free(gpointer p);
void iothread_options_free(gpointer p);
void secret_options_free(gpointer p);

#endif /* VBLK_OPTIONS_INTERNAL_H */
