/* Unit tests: the 16550 register model and the CMOS/RTC, without KVM. */
#include <glib.h>
#include <string.h>

#include "vmm/ports.h"
#include "vmm/serial.h"

typedef struct Sink {
    GString *out;
    int irq_changes;
    bool level;
} Sink;

static void sink_irq(void *opaque, bool level)
{
    Sink *s = opaque;

    s->level = level;
    s->irq_changes++;
}

static void sink_tx(void *opaque, uint8_t byte)
{
    Sink *s = opaque;

    g_string_append_c(s->out, byte);
}

static const Uart16550Ops sink_ops = {.set_irq = sink_irq, .tx = sink_tx};

static void setup(Uart16550 *u, Sink *s)
{
    memset(s, 0, sizeof(*s));
    s->out = g_string_new(NULL);
    uart_init(u, &sink_ops, s);
}

static void test_reset_state(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    g_assert_cmphex(uart_read(&u, UART_LSR), ==, UART_LSR_THRE | UART_LSR_TEMT);
    g_assert_cmphex(uart_read(&u, UART_IIR), ==, UART_IIR_NO_INT);
    g_assert_cmphex(uart_read(&u, UART_IER), ==, 0);
    g_assert_cmphex(uart_read(&u, UART_MSR), ==, 0xb0);
    g_assert_false(s.level);
    g_string_free(s.out, TRUE);
}

static void test_tx_and_scratch(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    for (const char *p = "hi\n"; *p; p++) {
        uart_write(&u, UART_RBR, *p);
    }
    g_assert_cmpstr(s.out->str, ==, "hi\n");
    uart_write(&u, UART_SCR, 0x5a);
    g_assert_cmphex(uart_read(&u, UART_SCR), ==, 0x5a);
    /* No THRI enabled: output never raises the line. */
    g_assert_false(s.level);
    g_string_free(s.out, TRUE);
}

static void test_dlab(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    uart_write(&u, UART_LCR, UART_LCR_DLAB | 0x03);
    uart_write(&u, UART_RBR, 0x01);
    uart_write(&u, UART_IER, 0x00);
    g_assert_cmphex(uart_read(&u, UART_RBR), ==, 0x01);
    g_assert_cmphex(uart_read(&u, UART_IER), ==, 0x00);
    g_assert_cmpuint(s.out->len, ==, 0); /* divisor writes are not output */
    uart_write(&u, UART_LCR, 0x03);
    g_assert_cmphex(uart_read(&u, UART_LCR), ==, 0x03);
    g_assert_cmphex(uart_read(&u, UART_IER), ==, 0);
    g_string_free(s.out, TRUE);
}

/* The sequence serial8250_do_startup() uses to detect UART_BUG_THRE. */
static void test_thre_linux_probe(void)
{
    Uart16550 u;
    Sink s;
    uint8_t iir1, iir2;

    setup(&u, &s);
    uart_write(&u, UART_IER, UART_IER_THRI);
    g_assert_true(s.level);
    iir1 = uart_read(&u, UART_IIR);
    g_assert_cmphex(iir1 & 0x0f, ==, UART_IIR_THRI);
    /* Reading IIR cleared the THRE source. */
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0x0f, ==, UART_IIR_NO_INT);
    g_assert_false(s.level);
    uart_write(&u, UART_IER, 0);
    uart_write(&u, UART_IER, UART_IER_THRI);
    iir2 = uart_read(&u, UART_IIR);
    g_assert_cmphex(iir2 & 0x0f, ==, UART_IIR_THRI); /* re-asserted: no UART_BUG_THRE */
    uart_write(&u, UART_IER, 0);
    g_string_free(s.out, TRUE);
}

/* Interrupt-driven output: each THR write re-arms THRE, giving a fresh edge. */
static void test_thre_after_write(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    uart_write(&u, UART_IER, UART_IER_THRI);
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0x0f, ==, UART_IIR_THRI);
    g_assert_false(s.level);
    s.irq_changes = 0;
    uart_write(&u, UART_RBR, 'x');
    g_assert_true(s.level);
    g_assert_cmpint(s.irq_changes, ==, 1);
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0x0f, ==, UART_IIR_THRI);
    /* Each byte written with THRI on is one more edge (the state dump's count). */
    g_assert_cmpuint(u.irq_raises, ==, 2);
    uart_write(&u, UART_RBR, 'y');
    g_assert_cmpuint(u.irq_raises, ==, 3);
    uart_write(&u, UART_IER, 0);
    g_assert_false(s.level);
    g_assert_cmpuint(u.irq_raises, ==, 3);
    g_string_free(s.out, TRUE);
}

static void test_rx_fifo(void)
{
    Uart16550 u;
    Sink s;
    uint8_t buf[40];

    setup(&u, &s);
    uart_write(&u, UART_IIR, UART_FCR_ENABLE);
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0xc0, ==, 0xc0); /* 16550A FIFO bits */
    memset(buf, 'a', sizeof(buf));
    g_assert_cmpuint(uart_receive(&u, buf, sizeof(buf)), ==, UART_FIFO_SIZE);
    g_assert_cmpuint(uart_rx_space(&u), ==, 0);
    g_assert_false(s.level); /* RDI not enabled */
    uart_write(&u, UART_IER, UART_IER_RDI);
    g_assert_true(s.level);
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0x0f, ==, UART_IIR_RDI);
    for (int i = 0; i < UART_FIFO_SIZE; i++) {
        g_assert_true(uart_read(&u, UART_LSR) & UART_LSR_DR);
        g_assert_cmpint(uart_read(&u, UART_RBR), ==, 'a');
    }
    g_assert_false(uart_read(&u, UART_LSR) & UART_LSR_DR);
    g_assert_false(s.level);
    g_assert_cmpint(uart_read(&u, UART_RBR), ==, 0); /* empty FIFO reads 0 */
    /* FCR clear-RX drops pending input. */
    uart_receive(&u, buf, 3);
    uart_write(&u, UART_IIR, UART_FCR_ENABLE | UART_FCR_CLR_RX);
    g_assert_false(uart_read(&u, UART_LSR) & UART_LSR_DR);
    g_string_free(s.out, TRUE);
}

static void test_no_fifo_holds_one(void)
{
    Uart16550 u;
    Sink s;
    const uint8_t ab[] = "ab";

    setup(&u, &s);
    g_assert_cmpuint(uart_receive(&u, ab, 2), ==, 1);
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0xc0, ==, 0);
    g_string_free(s.out, TRUE);
}

static void test_loopback(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    uart_write(&u, UART_IIR, UART_FCR_ENABLE);
    uart_write(&u, UART_MCR, UART_MCR_LOOP | 0x0a);            /* RTS | OUT2 */
    g_assert_cmphex(uart_read(&u, UART_MSR) & 0xf0, ==, 0x90); /* CTS | DCD */
    uart_write(&u, UART_RBR, 'z');
    g_assert_cmpuint(s.out->len, ==, 0);
    g_assert_cmpint(uart_read(&u, UART_RBR), ==, 'z');
    g_string_free(s.out, TRUE);
}

static void test_overrun(void)
{
    Uart16550 u;
    Sink s;

    setup(&u, &s);
    uart_write(&u, UART_IER, UART_IER_RLSI);
    /* Loopback into a full one-byte holding register overruns. */
    uart_write(&u, UART_MCR, UART_MCR_LOOP);
    uart_write(&u, UART_RBR, '1');
    uart_write(&u, UART_RBR, '2');
    g_assert_cmphex(uart_read(&u, UART_IIR) & 0x0f, ==, UART_IIR_RLSI);
    g_assert_true(uart_read(&u, UART_LSR) & UART_LSR_OE);
    g_assert_false(uart_read(&u, UART_LSR) & UART_LSR_OE); /* cleared by the read */
    g_string_free(s.out, TRUE);
}

static time_t fixed_now(void)
{
    return 1700000000; /* 2023-11-14 22:13:20 UTC, a Tuesday */
}

static void test_cmos(void)
{
    Cmos c;

    cmos_init(&c);
    c.now = fixed_now;
    cmos_write(&c, 0, 0x80 | 0x0a); /* NMI-disable bit is not part of the index */
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x26);
    cmos_write(&c, 0, 0x0b);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x02);
    cmos_write(&c, 0, 0x0d);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x80);
    cmos_write(&c, 0, 0x00);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x20);
    cmos_write(&c, 0, 0x02);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x13);
    cmos_write(&c, 0, 0x04);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x22);
    cmos_write(&c, 0, 0x07);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x14);
    cmos_write(&c, 0, 0x08);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x11);
    cmos_write(&c, 0, 0x09);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x23);
    cmos_write(&c, 0, 0x32);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0x20);
    /* Plain NVRAM bytes are stored. */
    cmos_write(&c, 0, 0x40);
    cmos_write(&c, 1, 0xab);
    g_assert_cmphex(cmos_read(&c, 1), ==, 0xab);
    /* UIP never shows. */
    cmos_write(&c, 0, 0x0a);
    cmos_write(&c, 1, 0xff);
    g_assert_cmphex(cmos_read(&c, 1) & 0x80, ==, 0);
}

/* Linux's i8042 probe and reboot paths against the device-less controller. */
static void test_i8042(void)
{
    I8042 k;

    i8042_init(&k);
    g_assert_cmphex(i8042_read(&k, 4) & 0x03, ==, 0); /* nothing to read, ready for input */
    g_assert_false(i8042_write(&k, 4, 0x20));         /* read CTR */
    g_assert_true(i8042_read(&k, 4) & I8042_STATUS_OBF);
    g_assert_cmphex(i8042_read(&k, 0), ==, 0x65);
    g_assert_false(i8042_read(&k, 4) & I8042_STATUS_OBF);
    i8042_write(&k, 4, 0x60); /* write CTR */
    i8042_write(&k, 0, 0x44);
    i8042_write(&k, 4, 0x20);
    g_assert_cmphex(i8042_read(&k, 0), ==, 0x44);
    i8042_write(&k, 4, 0xaa); /* self test */
    g_assert_cmphex(i8042_read(&k, 0), ==, 0x55);
    i8042_write(&k, 4, 0xd3); /* aux loopback */
    i8042_write(&k, 0, 0x5a);
    g_assert_true(i8042_read(&k, 4) & I8042_STATUS_AUXDATA);
    g_assert_cmphex(i8042_read(&k, 0), ==, 0x5a);
    g_assert_false(i8042_write(&k, 0, 0xff)); /* keyboard reset: no keyboard, ignored */
    g_assert_true(i8042_write(&k, 4, 0xfe));  /* pulse reset line */
    i8042_write(&k, 4, 0xd1);
    g_assert_true(i8042_write(&k, 0, 0xfe)); /* output port, reset bit low */
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/serial/reset-state", test_reset_state);
    g_test_add_func("/vmm/serial/tx-and-scratch", test_tx_and_scratch);
    g_test_add_func("/vmm/serial/dlab", test_dlab);
    g_test_add_func("/vmm/serial/thre-linux-probe", test_thre_linux_probe);
    g_test_add_func("/vmm/serial/thre-after-write", test_thre_after_write);
    g_test_add_func("/vmm/serial/rx-fifo", test_rx_fifo);
    g_test_add_func("/vmm/serial/no-fifo-holds-one", test_no_fifo_holds_one);
    g_test_add_func("/vmm/serial/loopback", test_loopback);
    g_test_add_func("/vmm/serial/overrun", test_overrun);
    g_test_add_func("/vmm/cmos/registers", test_cmos);
    g_test_add_func("/vmm/i8042/commands", test_i8042);
    return g_test_run();
}
