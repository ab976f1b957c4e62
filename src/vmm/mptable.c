/*
 * vblk: MP table writer. Layout per the MultiProcessor Specification 1.4:
 * a 16-byte floating pointer ("_MP_") pointing at a "PCMP" configuration
 * table of processor, bus, IOAPIC, I/O interrupt and local interrupt entries.
 * The structures are not in the kernel's uapi headers, so they are here.
 */
#include <errno.h>
#include <string.h>

#include "vmm/mptable.h"
#include "vmm/vmm.h"

#define MP_SPEC_REV      4
#define MP_APIC_VERSION  0x14
#define MP_CPU_ENABLED   1
#define MP_CPU_BSP       2
#define MP_CPU_SIGNATURE 0x600 /* family 6 */
#define MP_CPU_FEATURES  0x201 /* FPU | APIC */

enum { MP_PROCESSOR = 0, MP_BUS, MP_IOAPIC, MP_INTSRC, MP_LINTSRC };
enum { MP_INT = 0, MP_NMI = 1, MP_EXTINT = 3 };

/* Polarity in bits 0-1, trigger in bits 2-3. */
#define MP_IRQ_CONFORMING  0x0
#define MP_IRQ_ACTIVE_HIGH 0x1
#define MP_IRQ_LEVEL       0xc
#define MP_PCI_IRQ_FLAGS   (MP_IRQ_ACTIVE_HIGH | MP_IRQ_LEVEL)

typedef struct __attribute__((packed)) MpFloating {
    char signature[4];
    uint32_t physptr;
    uint8_t length; /* in 16-byte units */
    uint8_t specrev;
    uint8_t checksum;
    uint8_t feature[5];
} MpFloating;

typedef struct __attribute__((packed)) MpConfigHeader {
    char signature[4];
    uint16_t length;
    uint8_t spec;
    uint8_t checksum;
    char oem[8];
    char product[12];
    uint32_t oemptr;
    uint16_t oemsize;
    uint16_t oemcount;
    uint32_t lapic;
    uint32_t reserved;
} MpConfigHeader;

typedef struct __attribute__((packed)) MpCpu {
    uint8_t type;
    uint8_t apicid;
    uint8_t apicver;
    uint8_t cpuflag;
    uint32_t cpufeature;
    uint32_t featureflag;
    uint32_t reserved[2];
} MpCpu;

typedef struct __attribute__((packed)) MpBus {
    uint8_t type;
    uint8_t busid;
    char bustype[6];
} MpBus;

typedef struct __attribute__((packed)) MpIoApic {
    uint8_t type;
    uint8_t apicid;
    uint8_t apicver;
    uint8_t flags;
    uint32_t apicaddr;
} MpIoApic;

typedef struct __attribute__((packed)) MpIrq {
    uint8_t type;
    uint8_t irqtype;
    uint16_t irqflag;
    uint8_t srcbus;
    uint8_t srcbusirq;
    uint8_t dstapic;
    uint8_t dstirq;
} MpIrq;

G_STATIC_ASSERT(sizeof(MpFloating) == 16);
G_STATIC_ASSERT(sizeof(MpConfigHeader) == 44);
G_STATIC_ASSERT(sizeof(MpCpu) == 20);
G_STATIC_ASSERT(sizeof(MpBus) == 8 && sizeof(MpIoApic) == 8 && sizeof(MpIrq) == 8);

#define MP_ISA_IRQS  16
#define MP_LINT_IRQS 2

/* Context: any thread */
uint8_t mptable_checksum(const uint8_t *buf, size_t len)
{
    uint8_t sum = 0;

    for (size_t i = 0; i < len; i++) {
        sum += buf[i];
    }
    return sum;
}

static size_t mptable_entries(const MpTableConfig *cfg)
{
    return cfg->ncpus + 2 + 1 + MP_ISA_IRQS + cfg->npci_irqs + MP_LINT_IRQS;
}

/* Context: any thread */
size_t mptable_size(const MpTableConfig *cfg)
{
    return sizeof(MpFloating) + sizeof(MpConfigHeader) + cfg->ncpus * sizeof(MpCpu) +
           (mptable_entries(cfg) - cfg->ncpus) * 8;
}

static uint8_t *mp_put(uint8_t *p, const void *entry, size_t size)
{
    memcpy(p, entry, size);
    return p + size;
}

static uint8_t *mp_put_irq(uint8_t *p, uint8_t type, uint8_t irqtype, uint16_t flags, uint8_t bus,
                           uint8_t busirq, uint8_t apic, uint8_t pin)
{
    MpIrq e = {.type = type,
               .irqtype = irqtype,
               .irqflag = flags,
               .srcbus = bus,
               .srcbusirq = busirq,
               .dstapic = apic,
               .dstirq = pin};
    return mp_put(p, &e, sizeof(e));
}

static uint8_t *mp_put_cpus(uint8_t *p, unsigned ncpus)
{
    for (unsigned i = 0; i < ncpus; i++) {
        MpCpu cpu = {.type = MP_PROCESSOR,
                     .apicid = i,
                     .apicver = MP_APIC_VERSION,
                     .cpuflag = MP_CPU_ENABLED | (i == 0 ? MP_CPU_BSP : 0),
                     .cpufeature = MP_CPU_SIGNATURE,
                     .featureflag = MP_CPU_FEATURES};
        p = mp_put(p, &cpu, sizeof(cpu));
    }
    return p;
}

static uint8_t *mp_put_buses_and_ioapic(uint8_t *p, uint8_t ioapic_id)
{
    MpBus pci = {.type = MP_BUS, .busid = MPTABLE_PCI_BUS_ID};
    MpBus isa = {.type = MP_BUS, .busid = MPTABLE_ISA_BUS_ID};
    MpIoApic ioapic = {.type = MP_IOAPIC,
                       .apicid = ioapic_id,
                       .apicver = MP_APIC_VERSION,
                       .flags = 1,
                       .apicaddr = (uint32_t)VMM_IOAPIC_ADDR};

    memcpy(pci.bustype, "PCI   ", 6);
    memcpy(isa.bustype, "ISA   ", 6);
    p = mp_put(p, &pci, sizeof(pci));
    p = mp_put(p, &isa, sizeof(isa));
    return mp_put(p, &ioapic, sizeof(ioapic));
}

/* Context: any thread */
bool mptable_build(uint8_t *buf, size_t len, uint32_t gpa, const MpTableConfig *cfg, GError **errp)
{
    /* The IOAPIC ID must differ from every LAPIC ID (0..ncpus-1). */
    uint8_t ioapic_id = cfg->ncpus + 1;
    MpFloating *mpf = (MpFloating *)buf;
    MpConfigHeader *hdr = (MpConfigHeader *)(buf + sizeof(*mpf));
    uint8_t *p = (uint8_t *)(hdr + 1);

    if (cfg->ncpus == 0 || cfg->ncpus > 254 || len < mptable_size(cfg)) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "MP table: %u CPUs / %zu bytes do not fit", cfg->ncpus,
                    len);
        return false;
    }
    memset(buf, 0, mptable_size(cfg));
    p = mp_put_cpus(p, cfg->ncpus);
    p = mp_put_buses_and_ioapic(p, ioapic_id);
    /* ISA IRQ n -> IOAPIC pin n, matching KVM's default GSI routing. */
    for (unsigned irq = 0; irq < MP_ISA_IRQS; irq++) {
        p = mp_put_irq(p, MP_INTSRC, MP_INT, MP_IRQ_CONFORMING, MPTABLE_ISA_BUS_ID, irq, ioapic_id,
                       irq);
    }
    /* PCI: source IRQ is slot << 2 | (pin - 1); level, active high as KVM delivers it. */
    for (size_t i = 0; i < cfg->npci_irqs; i++) {
        const MpPciIrq *q = &cfg->pci_irqs[i];
        p = mp_put_irq(p, MP_INTSRC, MP_INT, MP_PCI_IRQ_FLAGS, MPTABLE_PCI_BUS_ID,
                       (q->slot << 2) | ((q->pin - 1) & 3), ioapic_id, q->gsi);
    }
    p = mp_put_irq(p, MP_LINTSRC, MP_EXTINT, MP_IRQ_CONFORMING, MPTABLE_ISA_BUS_ID, 0, 0xff, 0);
    p = mp_put_irq(p, MP_LINTSRC, MP_NMI, MP_IRQ_CONFORMING, MPTABLE_ISA_BUS_ID, 0, 0xff, 1);

    memcpy(hdr->signature, "PCMP", 4);
    hdr->length = p - (uint8_t *)hdr;
    hdr->spec = MP_SPEC_REV;
    memcpy(hdr->oem, "VBLK    ", 8);
    memcpy(hdr->product, "VBLK VMM    ", 12);
    hdr->oemcount = mptable_entries(cfg);
    hdr->lapic = (uint32_t)VMM_LAPIC_ADDR;
    hdr->checksum = -mptable_checksum((uint8_t *)hdr, hdr->length);

    memcpy(mpf->signature, "_MP_", 4);
    mpf->physptr = gpa + sizeof(*mpf);
    mpf->length = 1;
    mpf->specrev = MP_SPEC_REV;
    mpf->checksum = -mptable_checksum(buf, sizeof(*mpf));
    return true;
}
