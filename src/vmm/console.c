/*
 * vblk: serial console backend: UART output to a host fd, input from stdin
 * on a thread of its own (raw mode when it is a terminal), and the
 * "Ctrl-a x" escape that ends the VM.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "util/barrier.h"
#include "util/debug-state.h"
#include "vmm/console.h"
#include "vmm/serial.h"

struct Console {
    Vm *vm;
    Uart16550 uart;
    bool registered;
    int in_fd;
    int out_fd;
    bool own_out_fd;
    int stop_fd;
    pthread_t thread;
    bool thread_started;
    bool escape_pending;
    int mon_fd;       /* the monitor's input pipe (mux), or -1 */
    bool mon_focused; /* keys go to the monitor, not the UART */
};

/* The terminal state to restore; global because signal handlers need it. */
static struct termios console_saved_tty;
static atomic_bool console_tty_raw;

/* Context: any thread, async-signal-safe */
static void console_restore_tty(void)
{
    if (atomic_exchange(&console_tty_raw, false)) {
        tcsetattr(STDIN_FILENO, TCSANOW, &console_saved_tty);
    }
}

static void console_set_irq(void *opaque, bool level)
{
    Console *con = opaque;

    vm_set_irq_line(con->vm, UART_COM1_IRQ, level);
}

static void console_tx(void *opaque, uint8_t byte)
{
    Console *con = opaque;

    if (con->out_fd < 0) {
        return;
    }
    /* A vanished reader (EPIPE, closed pty) just loses output. */
    while (write(con->out_fd, &byte, 1) < 0 && errno == EINTR) {
    }
}

static const Uart16550Ops console_uart_ops = {
    .set_irq = console_set_irq,
    .tx = console_tx,
};

static uint64_t console_pio_read(void *opaque, uint64_t off, unsigned size)
{
    Console *con = opaque;

    return uart_read(&con->uart, off);
}

static void console_pio_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    Console *con = opaque;

    uart_write(&con->uart, off, val);
}

static const IoRegionOps console_pio_ops = {
    .read = console_pio_read,
    .write = console_pio_write,
};

static Console *console_alloc(Vm *vm)
{
    Console *con = g_new0(Console, 1);

    con->vm = vm;
    con->in_fd = con->out_fd = con->stop_fd = con->mon_fd = -1;
    uart_init(&con->uart, &console_uart_ops, con);
    return con;
}

/*
 * The UART as the guest's 8250 driver sees it. A console that stopped
 * mid-line with IER.THRI set, a THRE interrupt pending and the line high
 * means an edge the guest never took; THRI clear means the guest stopped
 * sending. Context: any thread (unsynchronized reads, for a state dump).
 */
static void console_debug_state(GString *out, void *opaque)
{
    Console *con = opaque;
    const Uart16550 *u = &con->uart;

    g_string_append_printf(out,
                           "uart: IER %#x, LSR %#x, MCR %#x, THRE interrupt pending %d, IRQ line %s, "
                           "%" G_GUINT64_FORMAT " bytes sent, %" G_GUINT64_FORMAT
                           " interrupts raised, %" G_GUINT64_FORMAT " received\n",
                           qatomic_read(&u->ier), qatomic_read(&u->lsr), qatomic_read(&u->mcr),
                           qatomic_read(&u->thr_ipending),
                           qatomic_read(&u->irq_level) ? "high" : "low",
                           qatomic_read(&u->tx_bytes), qatomic_read(&u->irq_raises),
                           qatomic_read(&u->rx_bytes));
}

static bool console_register(Console *con, GError **errp)
{
    bool ok;

    vm_lock(con->vm);
    ok = iobus_add(vm_pio_bus(con->vm), UART_COM1_BASE, 8, &console_pio_ops, con, errp);
    vm_unlock(con->vm);
    con->registered = ok;
    if (ok) {
        debug_state_register(console_debug_state, con);
    }
    return ok;
}

/* Context: main thread */
Console *console_new_fds(Vm *vm, int in_fd, int out_fd, GError **errp)
{
    Console *con = console_alloc(vm);

    con->in_fd = in_fd;
    con->out_fd = out_fd;
    if (!console_register(con, errp)) {
        console_free(con);
        return NULL;
    }
    return con;
}

/* Context: main thread */
Console *console_new(Vm *vm, ConsoleMode mode, const char *path, GError **errp)
{
    Console *con;
    int fd;

    switch (mode) {
    case CONSOLE_NONE:
        return console_alloc(vm);
    case CONSOLE_STDIO:
        return console_new_fds(vm, STDIN_FILENO, STDOUT_FILENO, errp);
    case CONSOLE_NULL:
        return console_new_fds(vm, -1, -1, errp);
    case CONSOLE_FILE:
    default:
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            g_set_error(errp, VMM_ERROR, errno, "-serial: cannot open '%s': %s", path,
                        g_strerror(errno));
            return NULL;
        }
        con = console_new_fds(vm, -1, fd, errp);
        if (con) {
            con->own_out_fd = true;
        } else {
            close(fd);
        }
        return con;
    }
}

static void console_mon_write(Console *con, const uint8_t *buf, size_t n);

/* Context: main thread, before console_start() */
int console_attach_monitor(Console *con, bool focused, GError **errp)
{
    int fds[2];

    if (con->mon_fd >= 0) {
        g_set_error(errp, VMM_ERROR, EBUSY, "stdio already has a monitor");
        return -1;
    }
    if (pipe2(fds, O_CLOEXEC) < 0) {
        g_set_error(errp, VMM_ERROR, errno, "pipe: %s", g_strerror(errno));
        return -1;
    }
    con->mon_fd = fds[1];
    if (focused) {
        con->mon_focused = true;
        console_mon_write(con, (const uint8_t *)"\0i", 2);
    }
    return fds[0];
}

/* Context: console input thread (or main thread before it starts) */
static void console_mon_write(Console *con, const uint8_t *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(con->mon_fd, buf, n);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return; /* the monitor has gone: its keys go nowhere */
        }
        buf += w;
        n -= w;
    }
}

/* A key for whoever has the focus; a NUL never reaches the monitor (its framing). */
static void console_route(Console *con, uint8_t ch, uint8_t *out, size_t *nout)
{
    if (!con->mon_focused) {
        out[(*nout)++] = ch;
    } else if (ch) {
        console_mon_write(con, &ch, 1);
    }
}

/* Handles the Ctrl-a prefix; returns false when the user asked to quit. */
static bool console_filter(Console *con, const uint8_t *in, size_t n, uint8_t *out, size_t *nout)
{
    static const char help[] = "\r\nC-a h    print this help\r\nC-a x    exit vblk\r\n"
                               "C-a c    switch between the console and the monitor\r\n"
                               "C-a C-a  send C-a\r\n";
    *nout = 0;
    for (size_t i = 0; i < n; i++) {
        if (!con->escape_pending) {
            if (in[i] == CONSOLE_ESCAPE_CHAR) {
                con->escape_pending = true;
            } else {
                console_route(con, in[i], out, nout);
            }
            continue;
        }
        con->escape_pending = false;
        if (in[i] == 'x') {
            return false;
        } else if (in[i] == 'h') {
            if (write(STDERR_FILENO, help, sizeof(help) - 1) < 0) {
                /* nowhere to report it */
            }
        } else if (in[i] == 'c' && con->mon_fd >= 0) {
            con->mon_focused = !con->mon_focused;
            console_mon_write(con, (const uint8_t *)(con->mon_focused ? "\0i" : "\0o"), 2);
        } else if (in[i] == CONSOLE_ESCAPE_CHAR) {
            console_route(con, CONSOLE_ESCAPE_CHAR, out, nout);
        } else {
            console_route(con, CONSOLE_ESCAPE_CHAR, out, nout);
            console_route(con, in[i], out, nout);
        }
    }
    return true;
}

static bool console_stopping(Console *con)
{
    struct pollfd p = {.fd = con->stop_fd, .events = POLLIN};

    return poll(&p, 1, 0) > 0;
}

/* Feeds bytes to the UART, waiting (1 ms steps) while its FIFO is full. */
static void console_feed(Console *con, const uint8_t *buf, size_t n)
{
    const struct timespec ms = {.tv_nsec = 1000000};

    while (n > 0 && !console_stopping(con)) {
        size_t done;

        vm_lock(con->vm);
        done = uart_receive(&con->uart, buf, n);
        vm_unlock(con->vm);
        buf += done;
        n -= done;
        if (n) {
            nanosleep(&ms, NULL);
        }
    }
}

static void *console_input_thread(void *arg)
{
    Console *con = arg;
    uint8_t in[64], out[128];

    pthread_setname_np(pthread_self(), "console-in");
    for (;;) {
        struct pollfd p[2] = {{.fd = con->in_fd, .events = POLLIN},
                              {.fd = con->stop_fd, .events = POLLIN}};
        ssize_t r;
        size_t nout;

        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (p[1].revents) {
            break;
        }
        r = read(con->in_fd, in, sizeof(in));
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (r <= 0) {
            break; /* end of input: the guest keeps running without it */
        }
        if (!console_filter(con, in, r, out, &nout)) {
            vm_request_exit(con->vm, VM_EXIT_QUIT, NULL);
            break;
        }
        console_feed(con, out, nout);
    }
    return NULL;
}

static void console_make_raw(int fd)
{
    struct termios tty;

    if (!isatty(fd) || tcgetattr(fd, &console_saved_tty) < 0) {
        return;
    }
    tty = console_saved_tty;
    /* Like QEMU's stdio chardev: raw input, no echo, no signals; keep output processing. */
    tty.c_iflag &= ~(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
    tty.c_oflag |= OPOST;
    tty.c_lflag &= ~(ECHO | ECHONL | ICANON | IEXTEN | ISIG);
    tty.c_cflag &= ~(CSIZE | PARENB);
    tty.c_cflag |= CS8;
    tty.c_cc[VMIN] = 1;
    tty.c_cc[VTIME] = 0;
    if (tcsetattr(fd, TCSANOW, &tty) == 0) {
        atomic_store(&console_tty_raw, true);
        atexit(console_restore_tty);
    }
}

/* Context: main thread */
bool console_start(Console *con, GError **errp)
{
    int err;

    if (con->in_fd < 0 || !con->registered) {
        return true;
    }
    con->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (con->stop_fd < 0) {
        g_set_error(errp, VMM_ERROR, errno, "eventfd: %s", g_strerror(errno));
        return false;
    }
    if (con->in_fd == STDIN_FILENO) {
        console_make_raw(con->in_fd);
    }
    err = pthread_create(&con->thread, NULL, console_input_thread, con);
    if (err) {
        g_set_error(errp, VMM_ERROR, EAGAIN, "console thread: %s", g_strerror(err));
        return false;
    }
    con->thread_started = true;
    return true;
}

/* Context: device lock held */
void console_reset(Console *con)
{
    Uart16550 *u = &con->uart;
    uint64_t tx = u->tx_bytes, rx = u->rx_bytes, overruns = u->rx_overruns;

    if (!con->registered) {
        return;
    }
    /* Pending input is dropped, as a real UART's FIFO is; the counters go on. */
    uart_init(u, &console_uart_ops, con);
    u->tx_bytes = tx;
    u->rx_bytes = rx;
    u->rx_overruns = overruns;
    vm_set_irq_line(con->vm, UART_COM1_IRQ, false);
}

/* Context: main thread */
void console_free(Console *con)
{
    uint64_t one = 1;

    if (!con) {
        return;
    }
    if (con->thread_started) {
        if (write(con->stop_fd, &one, sizeof(one)) < 0) {
            /* eventfd writes of 1 cannot fail */
        }
        pthread_join(con->thread, NULL);
    }
    if (con->in_fd == STDIN_FILENO) {
        console_restore_tty();
    }
    if (con->registered) {
        debug_state_unregister(console_debug_state, con);
        vm_lock(con->vm);
        iobus_remove(vm_pio_bus(con->vm), UART_COM1_BASE);
        vm_unlock(con->vm);
    }
    if (con->stop_fd >= 0) {
        close(con->stop_fd);
    }
    if (con->mon_fd >= 0) {
        close(con->mon_fd);
    }
    if (con->own_out_fd) {
        close(con->out_fd);
    }
    g_free(con);
}
