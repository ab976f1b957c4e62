/*
 * vblk: the legacy PC ports Linux touches that KVM does not emulate:
 * i8042 (0x60/0x64: reset by writing 0xfe to 0x64), the POST port 0x80,
 * port 0x92 (fast reset), and a minimal
 * MC146818 CMOS/RTC at 0x70/0x71. PIC, PIT and speaker (0x61) are in-kernel.
 */
#ifndef VBLK_PORTS_H
#define VBLK_PORTS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "vmm/vmm.h"

/* CMOS/RTC register model, testable without a VM. */
typedef struct Cmos {
    uint8_t index;
    uint8_t ram[128];
    time_t (*now)(void); /* host clock; tests replace it */
} Cmos;

/* Context: any thread */
void cmos_init(Cmos *cmos);
/* Context: device lock held */
uint8_t cmos_read(Cmos *cmos, unsigned port_off);
/* Context: device lock held */
void cmos_write(Cmos *cmos, unsigned port_off, uint8_t val);

/*
 * i8042 keyboard controller without devices behind it: enough of the command
 * set (read/write CTR, self tests, port enables, output-buffer loopback) for
 * Linux's probe to succeed quickly, and the 0xfe pulse that resets the PC.
 */
#define I8042_STATUS_OBF     0x01
#define I8042_STATUS_SYS     0x04
#define I8042_STATUS_UNLOCK  0x10 /* keyboard not inhibited ("keylock" off) */
#define I8042_STATUS_AUXDATA 0x20

typedef struct I8042 {
    uint8_t ctr;     /* controller configuration ("command byte") */
    uint8_t pending; /* command waiting for its data byte, or 0 */
    uint8_t out[4];
    bool out_aux[4];
    unsigned out_head, out_count;
    uint8_t last;
} I8042;

/* Context: any thread */
void i8042_init(I8042 *k);
/* Context: device lock held. @off 0 = data port 0x60, 4 = status/command port 0x64. */
uint8_t i8042_read(I8042 *k, unsigned off);
/* Context: device lock held. Returns true when the guest asked for a reset. */
bool i8042_write(I8042 *k, unsigned off, uint8_t val);

typedef struct LegacyPorts LegacyPorts;

/* Context: main thread. Registers all the ports above on the VM's PIO bus. */
LegacyPorts *legacy_ports_new(Vm *vm, GError **errp);
/* Context: main thread */
void legacy_ports_free(LegacyPorts *lp);
/*
 * Context: device lock held. Machine reset: i8042 and port 0x92 to power-on state,
 * CMOS index and control registers A-D as at power-on; CMOS NVRAM is kept (battery).
 */
void legacy_ports_reset(LegacyPorts *lp);

#endif /* VBLK_PORTS_H */
