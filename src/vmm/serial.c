/*
 * vblk: 16550A UART register model. Transmission is instantaneous, so THR
 * is always empty (LSR.THRE|TEMT) and a THR write re-arms the THRE interrupt
 * at once; the 8250 driver's interrupt-driven output depends on that.
 */
#include <string.h>

#include "vmm/serial.h"

#define UART_MSR_DCD_DSR_CTS 0xb0

static unsigned uart_rx_capacity(const Uart16550 *u)
{
    /* Without the FIFO a 16550 holds one character, like a 16450. */
    return u->fifo_enabled ? UART_FIFO_SIZE : 1;
}

static uint8_t uart_iir(const Uart16550 *u)
{
    if ((u->ier & UART_IER_RLSI) && (u->lsr & UART_LSR_OE)) {
        return UART_IIR_RLSI;
    }
    if ((u->ier & UART_IER_RDI) && u->rx_count) {
        return UART_IIR_RDI;
    }
    if ((u->ier & UART_IER_THRI) && u->thr_ipending) {
        return UART_IIR_THRI;
    }
    return UART_IIR_NO_INT;
}

static void uart_update_irq(Uart16550 *u)
{
    bool level = uart_iir(u) != UART_IIR_NO_INT;

    if (level != u->irq_level) {
        u->irq_level = level;
        u->irq_raises += level;
        if (u->ops && u->ops->set_irq) {
            u->ops->set_irq(u->opaque, level);
        }
    }
}

static void uart_update_lsr_dr(Uart16550 *u)
{
    if (u->rx_count) {
        u->lsr |= UART_LSR_DR;
    } else {
        u->lsr &= ~UART_LSR_DR;
    }
}

static bool uart_push_rx(Uart16550 *u, uint8_t byte)
{
    if (u->rx_count >= uart_rx_capacity(u)) {
        u->lsr |= UART_LSR_OE;
        u->rx_overruns++;
        return false;
    }
    u->rx[(u->rx_head + u->rx_count) % UART_FIFO_SIZE] = byte;
    u->rx_count++;
    u->rx_bytes++;
    uart_update_lsr_dr(u);
    return true;
}

static uint8_t uart_pop_rx(Uart16550 *u)
{
    uint8_t byte;

    if (!u->rx_count) {
        return 0;
    }
    byte = u->rx[u->rx_head];
    u->rx_head = (u->rx_head + 1) % UART_FIFO_SIZE;
    u->rx_count--;
    uart_update_lsr_dr(u);
    return byte;
}

/* Context: owner's thread, before use */
void uart_init(Uart16550 *u, const Uart16550Ops *ops, void *opaque)
{
    memset(u, 0, sizeof(*u));
    u->ops = ops;
    u->opaque = opaque;
    u->lsr = UART_LSR_THRE | UART_LSR_TEMT;
    u->msr = UART_MSR_DCD_DSR_CTS;
    u->dll = 0x0c; /* 9600 baud, as after a BIOS */
}

static uint8_t uart_msr(const Uart16550 *u)
{
    if (u->mcr & UART_MCR_LOOP) {
        /* Loopback: DTR->DSR, RTS->CTS, OUT1->RI, OUT2->DCD. */
        return ((u->mcr & 0x01) << 5) | ((u->mcr & 0x02) << 3) | ((u->mcr & 0x04) << 4) |
               ((u->mcr & 0x08) << 4);
    }
    return u->msr;
}

/* Context: caller holds the owner's lock */
uint8_t uart_read(Uart16550 *u, unsigned reg)
{
    uint8_t val;

    switch (reg & 7) {
    case UART_RBR:
        if (u->lcr & UART_LCR_DLAB) {
            return u->dll;
        }
        val = uart_pop_rx(u);
        uart_update_irq(u);
        return val;
    case UART_IER:
        return (u->lcr & UART_LCR_DLAB) ? u->dlm : u->ier;
    case UART_IIR:
        val = uart_iir(u);
        if (val == UART_IIR_THRI) {
            u->thr_ipending = false;
            uart_update_irq(u);
        }
        return val | (u->fifo_enabled ? UART_IIR_FIFO : 0);
    case UART_LCR:
        return u->lcr;
    case UART_MCR:
        return u->mcr;
    case UART_LSR:
        val = u->lsr;
        u->lsr &= ~UART_LSR_OE; /* error bits clear on read */
        uart_update_irq(u);
        return val;
    case UART_MSR:
        return uart_msr(u);
    default:
        return u->scr;
    }
}

static void uart_write_thr(Uart16550 *u, uint8_t val)
{
    u->thr_ipending = false;
    uart_update_irq(u);
    if (u->mcr & UART_MCR_LOOP) {
        uart_push_rx(u, val);
    } else {
        u->tx_bytes++;
        if (u->ops && u->ops->tx) {
            u->ops->tx(u->opaque, val);
        }
    }
    /* The byte left at once: the holding register is empty again. */
    u->thr_ipending = true;
    uart_update_irq(u);
}

static void uart_write_ier(Uart16550 *u, uint8_t val)
{
    uint8_t changed = (u->ier ^ val) & 0x0f;

    u->ier = val & 0x0f;
    if (changed & UART_IER_THRI) {
        u->thr_ipending = (u->ier & UART_IER_THRI) && (u->lsr & UART_LSR_THRE);
    }
    uart_update_irq(u);
}

static void uart_write_fcr(Uart16550 *u, uint8_t val)
{
    bool enable = val & UART_FCR_ENABLE;

    /* Toggling the FIFO enable resets both FIFOs, as on the real part. */
    if ((val & UART_FCR_CLR_RX) || enable != u->fifo_enabled) {
        u->rx_head = u->rx_count = 0;
        uart_update_lsr_dr(u);
    }
    u->fifo_enabled = enable;
    uart_update_irq(u);
}

/* Context: caller holds the owner's lock */
void uart_write(Uart16550 *u, unsigned reg, uint8_t val)
{
    switch (reg & 7) {
    case UART_RBR:
        if (u->lcr & UART_LCR_DLAB) {
            u->dll = val;
        } else {
            uart_write_thr(u, val);
        }
        break;
    case UART_IER:
        if (u->lcr & UART_LCR_DLAB) {
            u->dlm = val;
        } else {
            uart_write_ier(u, val);
        }
        break;
    case UART_IIR:
        uart_write_fcr(u, val);
        break;
    case UART_LCR:
        u->lcr = val;
        break;
    case UART_MCR:
        u->mcr = val & 0x1f;
        break;
    case UART_LSR:
    case UART_MSR:
        break; /* read-only (factory test on real parts) */
    default:
        u->scr = val;
        break;
    }
}

/* Context: caller holds the owner's lock */
size_t uart_receive(Uart16550 *u, const uint8_t *buf, size_t len)
{
    size_t n = 0;

    /* In loopback the line is disconnected from the outside world. */
    if (u->mcr & UART_MCR_LOOP) {
        return len;
    }
    while (n < len && u->rx_count < uart_rx_capacity(u)) {
        uart_push_rx(u, buf[n++]);
    }
    uart_update_irq(u);
    return n;
}

/* Context: caller holds the owner's lock */
size_t uart_rx_space(const Uart16550 *u)
{
    return uart_rx_capacity(u) - u->rx_count;
}
