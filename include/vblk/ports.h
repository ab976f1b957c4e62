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

#include "vblk/vmm.h"

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

typedef struct LegacyPorts LegacyPorts;

/* Context: main thread. Registers all the ports above on the VM's PIO bus. */
LegacyPorts *legacy_ports_new(Vm *vm, GError **errp);
/* Context: main thread */
void legacy_ports_free(LegacyPorts *lp);

#endif /* VBLK_PORTS_H */
