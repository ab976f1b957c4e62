/*
 * vblk: 16550A UART register model (ttyS0). A pure state machine: it knows
 * nothing of KVM or file descriptors. The owner supplies an IRQ-line
 * callback and a transmit callback, and feeds received bytes in.
 *
 * Interrupt semantics follow QEMU's hw/char/serial.c, which Linux's 8250
 * driver probes: the THRE interrupt is raised when the transmitter empties
 * or when IER.THRI is switched on while it is empty, and is cleared by an
 * IIR read that reports it or by a THR write.
 */
#ifndef VBLK_SERIAL_H
#define VBLK_SERIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UART_COM1_BASE 0x3f8
#define UART_COM1_IRQ  4
#define UART_FIFO_SIZE 16

/* Register offsets from the base port. */
enum {
    UART_RBR = 0, /* read: receive buffer; write: THR; DLL when LCR.DLAB */
    UART_IER = 1, /* DLM when LCR.DLAB */
    UART_IIR = 2, /* read: interrupt identification; write: FCR */
    UART_LCR = 3,
    UART_MCR = 4,
    UART_LSR = 5,
    UART_MSR = 6,
    UART_SCR = 7,
};

#define UART_IER_RDI    0x01
#define UART_IER_THRI   0x02
#define UART_IER_RLSI   0x04
#define UART_IIR_NO_INT 0x01
#define UART_IIR_THRI   0x02
#define UART_IIR_RDI    0x04
#define UART_IIR_RLSI   0x06
#define UART_IIR_FIFO   0xc0
#define UART_FCR_ENABLE 0x01
#define UART_FCR_CLR_RX 0x02
#define UART_LCR_DLAB   0x80
#define UART_MCR_LOOP   0x10
#define UART_LSR_DR     0x01
#define UART_LSR_OE     0x02
#define UART_LSR_THRE   0x20
#define UART_LSR_TEMT   0x40

typedef struct Uart16550Ops {
    void (*set_irq)(void *opaque, bool level);
    void (*tx)(void *opaque, uint8_t byte);
} Uart16550Ops;

typedef struct Uart16550 {
    const Uart16550Ops *ops;
    void *opaque;
    uint8_t ier, lcr, mcr, lsr, msr, scr, dll, dlm;
    bool fifo_enabled;
    bool thr_ipending;
    bool irq_level;
    uint8_t rx[UART_FIFO_SIZE];
    unsigned rx_head, rx_count;
    uint64_t tx_bytes, rx_bytes, rx_overruns;
    uint64_t irq_raises; /* interrupt line low -> high: the edges the guest got */
} Uart16550;

/* Context: owner's thread, before use. Power-on state. */
void uart_init(Uart16550 *u, const Uart16550Ops *ops, void *opaque);
/* Context: caller holds the owner's lock (vCPU thread for guest accesses) */
uint8_t uart_read(Uart16550 *u, unsigned reg);
/* Context: caller holds the owner's lock */
void uart_write(Uart16550 *u, unsigned reg, uint8_t val);
/* Context: caller holds the owner's lock. Queues input; returns bytes accepted. */
size_t uart_receive(Uart16550 *u, const uint8_t *buf, size_t len);
/* Context: caller holds the owner's lock. Free space in the receive FIFO. */
size_t uart_rx_space(const Uart16550 *u);

#endif /* VBLK_SERIAL_H */
