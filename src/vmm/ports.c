/*
 * vblk: legacy PC ports. Resets (i8042 0xfe, port 0x92 bit 0; 0xcf9 is in pci.c) ask
 * for a machine reset (vm_request_exit(VM_EXIT_RESET)): in place, or an exit with
 * status 0 under -no-reboot.
 */
#include <string.h>

#include "vmm/ports.h"

#define I8042_DATA 0x60
#define I8042_CMD  0x64
#define POST_PORT  0x80
#define PORT92     0x92
#define CMOS_PORT  0x70

#define RTC_SECONDS 0x00
#define RTC_MINUTES 0x02
#define RTC_HOURS   0x04
#define RTC_WEEKDAY 0x06
#define RTC_DAY     0x07
#define RTC_MONTH   0x08
#define RTC_YEAR    0x09
#define RTC_REG_A   0x0a
#define RTC_REG_B   0x0b
#define RTC_REG_C   0x0c
#define RTC_REG_D   0x0d
#define RTC_CENTURY 0x32

#define I8042_CTR_DEFAULT 0x65 /* kbd interrupt, system flag, aux disabled, translate */
#define I8042_CTR_KBD_OFF 0x10
#define I8042_CTR_AUX_OFF 0x20

struct LegacyPorts {
    Vm *vm;
    Cmos cmos;
    I8042 kbd;
    uint8_t port92;
};

static uint8_t bcd(unsigned v)
{
    return ((v / 10) << 4) | (v % 10);
}

static time_t cmos_host_now(void)
{
    return time(NULL);
}

/* Context: any thread */
void cmos_init(Cmos *cmos)
{
    memset(cmos, 0, sizeof(*cmos));
    cmos->now = cmos_host_now;
    /* UIP clear with a 32 kHz divider; 24-hour BCD; battery good. */
    cmos->ram[RTC_REG_A] = 0x26;
    cmos->ram[RTC_REG_B] = 0x02;
    cmos->ram[RTC_REG_D] = 0x80;
}

static uint8_t cmos_time_reg(Cmos *cmos, unsigned reg)
{
    time_t t = cmos->now();
    struct tm tm;

    gmtime_r(&t, &tm);
    switch (reg) {
    case RTC_SECONDS:
        return bcd(tm.tm_sec);
    case RTC_MINUTES:
        return bcd(tm.tm_min);
    case RTC_HOURS:
        return bcd(tm.tm_hour);
    case RTC_WEEKDAY:
        return bcd(tm.tm_wday + 1);
    case RTC_DAY:
        return bcd(tm.tm_mday);
    case RTC_MONTH:
        return bcd(tm.tm_mon + 1);
    case RTC_YEAR:
        return bcd(tm.tm_year % 100);
    default:
        return bcd((tm.tm_year + 1900) / 100);
    }
}

/* Context: device lock held */
uint8_t cmos_read(Cmos *cmos, unsigned port_off)
{
    unsigned reg = cmos->index;

    if (port_off == 0) {
        return 0xff; /* the index port is write-only */
    }
    switch (reg) {
    case RTC_SECONDS:
    case RTC_MINUTES:
    case RTC_HOURS:
    case RTC_WEEKDAY:
    case RTC_DAY:
    case RTC_MONTH:
    case RTC_YEAR:
    case RTC_CENTURY:
        return cmos_time_reg(cmos, reg);
    case RTC_REG_C:
        return 0; /* no interrupt flags: no RTC interrupts are generated */
    default:
        return cmos->ram[reg];
    }
}

/* Context: device lock held */
void cmos_write(Cmos *cmos, unsigned port_off, uint8_t val)
{
    if (port_off == 0) {
        cmos->index = val & 0x7f; /* bit 7 is the NMI mask */
        return;
    }
    switch (cmos->index) {
    case RTC_REG_A:
        /* UIP (bit 7) is read-only and stays clear. */
        cmos->ram[RTC_REG_A] = val & 0x7f;
        break;
    case RTC_REG_B:
        /* Keep BCD 24-hour; time-of-day writes are ignored (host clock). */
        cmos->ram[RTC_REG_B] = (val & ~0x06) | 0x02;
        break;
    case RTC_REG_C:
    case RTC_REG_D:
        break;
    default:
        if (cmos->index > RTC_YEAR && cmos->index != RTC_CENTURY) {
            cmos->ram[cmos->index] = val;
        }
        break;
    }
}

/* Context: any thread */
void i8042_init(I8042 *k)
{
    memset(k, 0, sizeof(*k));
    k->ctr = I8042_CTR_DEFAULT;
}

static void i8042_queue(I8042 *k, uint8_t val, bool aux)
{
    unsigned i;

    if (k->out_count == G_N_ELEMENTS(k->out)) {
        return;
    }
    i = (k->out_head + k->out_count) % G_N_ELEMENTS(k->out);
    k->out[i] = val;
    k->out_aux[i] = aux;
    k->out_count++;
}

/* Context: device lock held */
uint8_t i8042_read(I8042 *k, unsigned off)
{
    uint8_t status = I8042_STATUS_SYS | I8042_STATUS_UNLOCK;

    if (off != 0) {
        /* The input buffer is always empty, so kb_wait() never spins. */
        if (k->out_count) {
            status |= I8042_STATUS_OBF;
            status |= k->out_aux[k->out_head] ? I8042_STATUS_AUXDATA : 0;
        }
        return status;
    }
    if (k->out_count) {
        k->last = k->out[k->out_head];
        k->out_head = (k->out_head + 1) % G_N_ELEMENTS(k->out);
        k->out_count--;
    }
    return k->last;
}

static bool i8042_command(I8042 *k, uint8_t cmd)
{
    switch (cmd) {
    case 0x20: /* read CTR */
        i8042_queue(k, k->ctr, false);
        break;
    case 0x60: /* write CTR */
    case 0xd1: /* write output port */
    case 0xd2: /* write keyboard output buffer */
    case 0xd3: /* write aux output buffer */
    case 0xd4: /* write to aux device */
        k->pending = cmd;
        break;
    case 0xa7:
        k->ctr |= I8042_CTR_AUX_OFF;
        break;
    case 0xa8:
        k->ctr &= ~I8042_CTR_AUX_OFF;
        break;
    case 0xa9: /* aux interface test: OK */
    case 0xab: /* keyboard interface test: OK */
        i8042_queue(k, 0x00, false);
        break;
    case 0xaa: /* controller self test: passed */
        i8042_queue(k, 0x55, false);
        break;
    case 0xad:
        k->ctr |= I8042_CTR_KBD_OFF;
        break;
    case 0xae:
        k->ctr &= ~I8042_CTR_KBD_OFF;
        break;
    default:
        /* 0xf0-0xff pulse output lines; bit 0 low pulses the CPU reset line. */
        return cmd >= 0xf0 && !(cmd & 1);
    }
    return false;
}

/* Context: device lock held */
bool i8042_write(I8042 *k, unsigned off, uint8_t val)
{
    uint8_t cmd = k->pending;

    if (off != 0) {
        k->pending = 0;
        return i8042_command(k, val);
    }
    k->pending = 0;
    switch (cmd) {
    case 0x60:
        k->ctr = val;
        break;
    case 0xd1:
        return !(val & 1); /* output port bit 0 is the reset line, active low */
    case 0xd2:
    case 0xd3:
        i8042_queue(k, val, cmd == 0xd3);
        break;
    default:
        break; /* bytes for a keyboard or mouse: there is none */
    }
    return false;
}

static void ports_reset(LegacyPorts *lp)
{
    vm_request_exit(lp->vm, VM_EXIT_RESET, NULL);
}

static uint64_t i8042_pio_read(void *opaque, uint64_t off, unsigned size)
{
    LegacyPorts *lp = opaque;

    return off == 0 || off == I8042_CMD - I8042_DATA ? i8042_read(&lp->kbd, off) : 0xff;
}

static void i8042_pio_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    LegacyPorts *lp = opaque;

    if ((off == 0 || off == I8042_CMD - I8042_DATA) && i8042_write(&lp->kbd, off, val)) {
        ports_reset(lp);
    }
}

static uint64_t cmos_pio_read(void *opaque, uint64_t off, unsigned size)
{
    LegacyPorts *lp = opaque;

    return cmos_read(&lp->cmos, off);
}

static void cmos_pio_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    LegacyPorts *lp = opaque;

    cmos_write(&lp->cmos, off, val);
}

static uint64_t post_read(void *opaque, uint64_t off, unsigned size)
{
    return 0xff;
}

static void post_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    /* io_delay and POST codes: nothing to do, but they are not "unhandled". */
}

static uint64_t port92_read(void *opaque, uint64_t off, unsigned size)
{
    LegacyPorts *lp = opaque;

    return lp->port92 | 0x02; /* A20 always enabled */
}

static void port92_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    LegacyPorts *lp = opaque;

    lp->port92 = val & ~0x01;
    if (val & 0x01) {
        ports_reset(lp);
    }
}

static const IoRegionOps i8042_ops = {.read = i8042_pio_read, .write = i8042_pio_write};
static const IoRegionOps cmos_ops = {.read = cmos_pio_read, .write = cmos_pio_write};
static const IoRegionOps post_ops = {.read = post_read, .write = post_write};
static const IoRegionOps port92_ops = {.read = port92_read, .write = port92_write};

/* Context: main thread */
LegacyPorts *legacy_ports_new(Vm *vm, GError **errp)
{
    LegacyPorts *lp = g_new0(LegacyPorts, 1);
    IoBus *bus = vm_pio_bus(vm);
    bool ok;

    lp->vm = vm;
    cmos_init(&lp->cmos);
    i8042_init(&lp->kbd);
    vm_lock(vm);
    /* 0x60-0x64 as one region: 0x61 (speaker) is taken by KVM's PIT before it gets here. */
    ok = iobus_add(bus, I8042_DATA, 5, &i8042_ops, lp, errp) &&
         iobus_add(bus, CMOS_PORT, 2, &cmos_ops, lp, errp) &&
         iobus_add(bus, POST_PORT, 1, &post_ops, lp, errp) &&
         iobus_add(bus, PORT92, 1, &port92_ops, lp, errp);
    vm_unlock(vm);
    if (!ok) {
        legacy_ports_free(lp);
        return NULL;
    }
    return lp;
}

/* Context: device lock held */
void legacy_ports_reset(LegacyPorts *lp)
{
    Cmos fresh;

    i8042_init(&lp->kbd);
    lp->port92 = 0;
    cmos_init(&fresh);
    lp->cmos.index = 0;
    for (unsigned r = RTC_REG_A; r <= RTC_REG_D; r++) {
        lp->cmos.ram[r] = fresh.ram[r];
    }
}

/* Context: main thread */
void legacy_ports_free(LegacyPorts *lp)
{
    IoBus *bus;

    if (!lp) {
        return;
    }
    bus = vm_pio_bus(lp->vm);
    vm_lock(lp->vm);
    iobus_remove(bus, I8042_DATA);
    iobus_remove(bus, CMOS_PORT);
    iobus_remove(bus, POST_PORT);
    iobus_remove(bus, PORT92);
    vm_unlock(lp->vm);
    g_free(lp);
}
