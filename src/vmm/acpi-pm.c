/*
 * vblk: ACPI PM1 fixed hardware (ACPI 6.5 4.8.3): PM1_STS / PM1_EN at 0x600,
 * PM1_CNT at 0x604. The power button sets PWRBTN_STS; the SCI (GSI 9, level)
 * is high while STS & EN is not zero; SLP_EN with \_S5's SLP_TYP powers off.
 * The guest may access the block at any offset with any size: it is handled
 * one byte at a time, bytes past the block read 0xff and are not written.
 */
#include <string.h>

#include "vmm/acpi.h"

#define PM_REG_STS 0
#define PM_REG_EN  1
#define PM_REG_CNT 2
#define PM_NREGS   3

/* What PM1_CNT keeps; SLP_EN and GBL_RLS are write-only and read 0. */
#define PM1_CNT_STORED (ACPI_PM1_CNT_BM_RLD | ACPI_PM1_CNT_SLP_TYP)

static void acpi_pm_update_sci(AcpiPm *pm)
{
    bool level = (pm->sts & pm->en) != 0;

    if (level != pm->sci) {
        pm->sci = level;
        if (pm->set_sci) {
            pm->set_sci(pm->opaque, level);
        }
    }
}

/* Context: any thread */
void acpi_pm_init(AcpiPm *pm, void (*set_sci)(void *, bool), void (*poweroff)(void *), void *opaque)
{
    memset(pm, 0, sizeof(*pm));
    pm->set_sci = set_sci;
    pm->poweroff = poweroff;
    pm->opaque = opaque;
}

/* Context: device lock held */
void acpi_pm_reset(AcpiPm *pm)
{
    pm->sts = 0;
    pm->en = 0;
    pm->cnt = 0;
    acpi_pm_update_sci(pm);
}

static uint16_t acpi_pm_reg(const AcpiPm *pm, unsigned reg)
{
    switch (reg) {
    case PM_REG_STS:
        return pm->sts;
    case PM_REG_EN:
        return pm->en;
    default:
        /* SCI_EN is hardwired: there is no legacy (SMM) mode to switch from. */
        return pm->cnt | ACPI_PM1_CNT_SCI_EN;
    }
}

/* One byte of one register: @mask is 0x00ff or 0xff00. */
static void acpi_pm_write_reg(AcpiPm *pm, unsigned reg, uint16_t val, uint16_t mask)
{
    val &= mask;
    switch (reg) {
    case PM_REG_STS:
        pm->sts &= ~val; /* write 1 to clear */
        break;
    case PM_REG_EN:
        pm->en = (pm->en & ~mask) | (val & ACPI_PM1_EN_MASK);
        break;
    default:
        pm->cnt = (pm->cnt & ~(mask & PM1_CNT_STORED)) | (val & PM1_CNT_STORED);
        if ((val & ACPI_PM1_CNT_SLP_EN) &&
            ((pm->cnt & ACPI_PM1_CNT_SLP_TYP) >> ACPI_PM1_CNT_SLP_SHIFT) == ACPI_S5_SLP_TYP &&
            pm->poweroff) {
            /* Only \_S5 is offered; SLP_EN with another type is ignored (stays in S0). */
            pm->poweroff(pm->opaque);
        }
        break;
    }
}

/* Context: device lock held */
uint64_t acpi_pm_read(AcpiPm *pm, uint64_t off, unsigned size)
{
    uint64_t val = 0;

    for (unsigned i = 0; i < size && i < 8; i++) {
        uint64_t a = off + i;
        uint8_t byte = 0xff;

        if (a < ACPI_PM_LEN) {
            byte = (uint8_t)(acpi_pm_reg(pm, a / 2) >> (8 * (a % 2)));
        }
        val |= (uint64_t)byte << (8 * i);
    }
    return val;
}

/* Context: device lock held */
void acpi_pm_write(AcpiPm *pm, uint64_t off, uint64_t val, unsigned size)
{
    for (unsigned i = 0; i < size && i < 8; i++) {
        uint64_t a = off + i;
        unsigned shift = 8 * (a % 2);

        if (a < ACPI_PM_LEN) {
            acpi_pm_write_reg(pm, a / 2, (uint16_t)(((val >> (8 * i)) & 0xff) << shift),
                              (uint16_t)(0xff << shift));
        }
    }
    acpi_pm_update_sci(pm);
}

/* Context: device lock held */
bool acpi_pm_press_power_button(AcpiPm *pm)
{
    bool listening = (pm->en & ACPI_PM1_PWRBTN) != 0;

    pm->pwrbtn_presses++;
    if (!listening) {
        pm->pwrbtn_ignored++;
    }
    /* The status bit is set whether or not it is enabled, as on hardware. */
    pm->sts |= ACPI_PM1_PWRBTN;
    acpi_pm_update_sci(pm);
    return listening;
}

struct AcpiPmDevice {
    Vm *vm;
    AcpiPm pm;
};

static void acpi_pm_dev_set_sci(void *opaque, bool level)
{
    AcpiPmDevice *dev = opaque;

    vm_set_irq_line(dev->vm, ACPI_SCI_IRQ, level);
}

static void acpi_pm_dev_poweroff(void *opaque)
{
    AcpiPmDevice *dev = opaque;

    vm_request_exit(dev->vm, VM_EXIT_POWEROFF, NULL);
}

static uint64_t acpi_pm_pio_read(void *opaque, uint64_t off, unsigned size)
{
    AcpiPmDevice *dev = opaque;

    return acpi_pm_read(&dev->pm, off, size);
}

static void acpi_pm_pio_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    AcpiPmDevice *dev = opaque;

    acpi_pm_write(&dev->pm, off, val, size);
}

static const IoRegionOps acpi_pm_ops = {.read = acpi_pm_pio_read, .write = acpi_pm_pio_write};

/* Context: main thread */
AcpiPmDevice *acpi_pm_device_new(Vm *vm, GError **errp)
{
    AcpiPmDevice *dev = g_new0(AcpiPmDevice, 1);
    bool ok;

    dev->vm = vm;
    acpi_pm_init(&dev->pm, acpi_pm_dev_set_sci, acpi_pm_dev_poweroff, dev);
    vm_lock(vm);
    ok = iobus_add(vm_pio_bus(vm), ACPI_PM_BASE, ACPI_PM_LEN, &acpi_pm_ops, dev, errp);
    vm_unlock(vm);
    if (!ok) {
        g_free(dev);
        return NULL;
    }
    return dev;
}

/* Context: main thread */
void acpi_pm_device_free(AcpiPmDevice *dev)
{
    if (!dev) {
        return;
    }
    vm_lock(dev->vm);
    iobus_remove(vm_pio_bus(dev->vm), ACPI_PM_BASE);
    vm_unlock(dev->vm);
    g_free(dev);
}

/* Context: device lock held */
bool acpi_pm_device_powerdown(AcpiPmDevice *dev)
{
    return acpi_pm_press_power_button(&dev->pm);
}

/* Context: device lock held */
void acpi_pm_device_reset(AcpiPmDevice *dev)
{
    acpi_pm_reset(&dev->pm);
}

/* Context: device lock held */
const AcpiPm *acpi_pm_device_state(AcpiPmDevice *dev)
{
    return &dev->pm;
}
