#!/usr/bin/env python3
"""The human monitor (HMP), against vblk's virtio-blk-pci device model
without KVM (qmp-blk-helper with $HMP_MONITOR set).

1. Over a unix socket (-monitor unix:PATH,server=on,wait=off): the banner and
   prompt, the commands' real effects (qom-set x-data-plane switches the
   path, block_set_io_throttle shows in info block, block_resize changes the
   image size, stop/cont change info status), history and line editing,
   human-monitor-command over QMP, telnet negotiation, and hostile input
   (random bytes, escapes, overlong lines, unterminated strings) after which
   the monitor still answers.
2. Transcript: QEMU 7.2 (TCG, -S, -monitor stdio) and vblk get the same
   lines; the outputs are compared line by line after the numbers that
   legitimately differ (thread ids, QEMU's automatic node names) are
   normalised.  Differences that remain are listed in KNOWN with their
   reason (also in docs/qmp.md); any other difference fails.  This part is
   skipped (reported) without qemu-system-x86_64.

usage: hmp-transcript.py QMP-BLK-HELPER
"""
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

QEMU = shutil.which("qemu-system-x86_64")
PROMPT = b"(qemu) "
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


class Hmp:
    """One HMP connection: send a line, read up to the next prompt."""

    def __init__(self, sock=None, proc=None):
        self.sock, self.proc, self.buf = sock, proc, b""
        if proc:
            os.set_blocking(proc.stdout.fileno(), False)

    def _read(self, timeout):
        if self.sock:
            self.sock.settimeout(timeout)
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                return None
            return d
        import select
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return None
        return os.read(self.proc.stdout.fileno(), 65536)

    def until(self, marker=PROMPT, timeout=10.0):
        end = time.time() + timeout
        while marker not in self.buf:
            left = end - time.time()
            if left <= 0:
                raise TimeoutError("no %r in %r" % (marker, self.buf[-300:]))
            d = self._read(left)
            if d == b"":
                raise EOFError("monitor closed; got %r" % self.buf[-300:])
            if d:
                self.buf += d
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def send(self, data):
        if self.sock:
            self.sock.sendall(data)
        else:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def cmd(self, line):
        """The output of @line: what follows the echoed line, up to the next prompt."""
        self.send(line.encode() + b"\n")
        raw = self.until()
        text = raw[:-len(PROMPT)].decode(errors="replace")
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
        lines = text.split("\r\n")
        return lines[1:-1] if lines and lines[-1] == "" else lines[1:]


def helper_env(monitor):
    env = dict(os.environ)
    env["HMP_MONITOR"] = monitor
    return env


def wait_socket(path, proc):
    for _ in range(200):
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(path)
                return s
            except OSError:
                s.close()
        check(proc.poll() is None, "helper exited early")
        time.sleep(0.02)
    raise TimeoutError("no socket " + path)


def socket_tests(helper, tmp):
    img = os.path.join(tmp, "sock.img")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    path = os.path.join(tmp, "hmp.sock")
    p = subprocess.Popen([helper, "drive", "id=drive0,file=%s,format=raw" % img, "vd0"],
                         env=helper_env("unix:%s,server=on,wait=off" % path),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        h = Hmp(sock=wait_socket(path, p))
        banner = h.until()
        check(banner == b"QEMU 7.2.0 monitor - type 'help' for more information\r\n(qemu) ",
              "banner %r" % banner)
        check(h.cmd("info status") == ["VM status: paused (prelaunch)"], "info status prelaunch")
        check(h.cmd("cont") == [], "cont")
        check(h.cmd("info status") == ["VM status: running"], "info status after cont")
        check(h.cmd("stop") == [], "stop")
        check(h.cmd("info status") == ["VM status: paused"], "info status after stop")

        # x-data-plane switches from the prompt, and the device says so
        check(h.cmd("qom-get /machine/peripheral/vd0 x-data-plane") == ["false"], "dp initially off")
        check(h.cmd("qom-set /machine/peripheral/vd0 x-data-plane on") == [], "switch on")
        check(h.cmd("qom-get /machine/peripheral/vd0 x-data-plane") == ["true"], "dp now on")
        dp = h.cmd("info virtio-blk-dataplane")
        check(len(dp) >= 1 and dp[0].startswith("vd0:") and "x-data-plane=on" in dp[0],
              "info virtio-blk-dataplane after switch: %r" % dp)
        check(h.cmd("qom-set /machine/peripheral/vd0 x-data-plane off") == [], "switch off")
        check("x-data-plane=off" in h.cmd("info virtio-blk-dataplane")[0], "dp off")
        check(h.cmd("qom-set /machine/peripheral/vd0 x-data-plane maybe") ==
              ["Error: Parameter 'x-data-plane' expects 'on' or 'off'"], "bad bool")
        check(h.cmd("qom-set -j /machine/peripheral/vd0 x-data-plane true") == [], "-j switch")
        check(h.cmd("qom-get /machine/peripheral/vd0 x-data-plane") == ["true"], "-j took")

        # throttling and resize reach the drive
        check(h.cmd("block_set_io_throttle drive0 0 0 0 100 0 0") == [], "throttle")
        blk = h.cmd("info block")
        check(any(l.startswith("    I/O throttling:   bps=0 ") and " iops=100 " in l for l in blk),
              "info block shows the limits: %r" % blk)
        check(h.cmd("block_resize drive0 128M") == [], "resize")
        check(os.path.getsize(img) == 128 << 20, "image resized to 128 MiB")
        check(h.cmd("block_resize drive0 1G") == [] and os.path.getsize(img) == 1 << 30,
              "image resized to 1 GiB")

        # Tab completes a block device name (and a command, an info subcommand)
        check(h.cmd("info block -v dr\t") == h.cmd("info block -v drive0"),
              "tab: info block device")
        check(h.cmd("block_res\tdr\t1G") == [] and os.path.getsize(img) == 1 << 30,
              "tab: block_resize drive0")
        h.send(b"info bl\t")
        out = h.until(b"(qemu) info block").decode(errors="replace")
        check(out.endswith("\r\nblock       blockstats  \r\n(qemu) info block"),
              "tab: candidates listed: %r" % out)
        h.send(b"\x15")
        h.until(b"\x1b[K")

        # history: up arrow recalls the last line
        h.send(b"\x1b[A")
        h.until()  # the line redrawn after "\r(qemu) "
        h.send(b"\r")
        out = h.until().decode(errors="replace")
        check(out.startswith("block_resize drive0 1G\x1b[K\r\n"), "history recall: %r" % out)
        # line editing: backspace
        check(h.cmd("info statuz\x7fs") == ["VM status: paused"], "backspace")
        # cursor movement: left/right, Home/End, Delete, Ctrl-K
        check(h.cmd("info tatus" + "\x1b[D" * 5 + "s") == ["VM status: paused"], "insert")
        check(h.cmd("info statuss\x1b[D\x1b[3~") == ["VM status: paused"], "delete key")
        check(h.cmd("nfo status\x1b[Hi\x1b[F") == ["VM status: paused"], "home/end")
        check(h.cmd("info status junk" + "\x1b[D" * 5 + "\x0b") == ["VM status: paused"],
              "ctrl-k")
        check(h.cmd("info sXtatus\x1b[1~\x1b[C" * 1 + "\x1b[C" * 6 + "\x7f\x1b[4~") ==
              ["VM status: paused"], "ESC [ 1 ~ / 4 ~")

        # hostile input: the monitor survives and still answers (the junk may
        # recall history and redraw prompts, so resynchronise on a marker)
        rnd = random.Random(14)
        for _ in range(50):
            junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))
            h.send(junk.replace(b"\r", b"").replace(b"\n", b"") + b"\n")
        for line in ["info " + "x" * 10000, "qom-set", "qom-set -j a b {", "\"", "help " * 500,
                     "block_set_io_throttle drive0 99999999999999999999999 0 0 0 0 0",
                     "block_resize drive0 1e400", "block_resize drive0 nan",
                     "block_resize drive0 inf", "block_resize drive0 -0",
                     "block_set_io_throttle drive0 -9223372036854775808 0 0 0 0 0",
                     "block_set_io_throttle drive0 18446744073709551615 0 0 0 0 0", "qom-get \"\\q\" x", "info block \"",
                     "block_resize \"\" 1M", "qom-list \"\"", "x" * 70000]:
            h.send(line.encode() + b"\n")
        h.send(b"\x1b[1;5D\x1b[C\x00\x01\x15info status\n")
        h.until(b"VM status: ", timeout=20)
        h.until()
        check(p.poll() is None, "alive after hostile input")
        check(h.cmd("info status") in (["VM status: paused"], ["VM status: running"]),
              "answers after hostile input")
        h.send(b"quit\n")
    except Exception as e:  # noqa: BLE001
        check(False, "socket tests: %s" % e)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    check(p.returncode == 0, "helper exit status %s after quit" % p.returncode)


def write_and_close_tests(helper, tmp):
    """`echo quit | socat - UNIX:...`: commands sent by a client that closes at once still run.

    The echo of the first typed character used to fail (EPIPE) and close the
    session, dropping the rest of the line: vblk never quit. Same for QMP.
    """
    img = os.path.join(tmp, "wc.img")
    with open(img, "wb") as f:
        f.truncate(1 << 20)
    for mode, payload in (("hmp", b"quit\n"),
                          ("qmp", b'{"execute": "qmp_capabilities"}\n{"execute": "quit"}\n')):
        for trial in range(3):
            path = os.path.join(tmp, "wc-%s-%d.sock" % (mode, trial))
            env = helper_env("unix:%s,server=on,wait=off" % path)
            if mode == "qmp":
                env = dict(os.environ)
                env["QMP_MONITOR"] = "unix:%s,server=on,wait=off" % path
            p = subprocess.Popen([helper, "drive", "id=drive0,file=%s,format=raw" % img, "vd0"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            try:
                s = wait_socket(path, p)
                if mode == "hmp":
                    buf = b""
                    while b"(qemu) " not in buf:
                        buf += s.recv(4096)
                s.sendall(payload)
                s.close()
                p.wait(timeout=10)
                check(p.returncode == 0, "%s: quit then close at once: status %s" % (mode, p.returncode))
            except Exception as e:  # noqa: BLE001
                check(False, "%s: quit then close at once (try %d): %s" % (mode, trial, e))
                p.kill()
                p.wait()


def telnet_test(helper, tmp):
    img = os.path.join(tmp, "tel.img")
    with open(img, "wb") as f:
        f.truncate(1 << 20)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([helper, "drive", "id=drive0,file=%s,format=raw" % img, "vd0"],
                         env=helper_env("telnet::%d,server=on,wait=off" % port),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                time.sleep(0.02)
        h = Hmp(sock=c)
        first = h.until()
        check(first.startswith(b"\xff\xfb\x01"), "telnet negotiation first: %r" % first[:12])
        # a client's own negotiation and CR NUL line ends are not commands
        h.send(b"\xff\xfd\x01\xff\xfa\x18\x01\xff\xf0info status\r\x00")
        out = h.until().decode(errors="replace")
        check("VM status: paused (prelaunch)" in out, "telnet command: %r" % out)
        h.send(b"quit\r\n")
    except Exception as e:  # noqa: BLE001
        check(False, "telnet: %s" % e)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def hmc_test(helper, tmp):
    """human-monitor-command: the same lines from QMP, output with CR LF."""
    img = os.path.join(tmp, "hmc.img")
    with open(img, "wb") as f:
        f.truncate(1 << 20)
    p = subprocess.Popen([helper, "drive", "id=drive0,file=%s,format=raw" % img, "vd0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdout.readline()

    def qmp(cmd, args=None):
        msg = {"execute": cmd}
        if args is not None:
            msg["arguments"] = args
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()
        while True:
            r = json.loads(p.stdout.readline())
            if "event" not in r:
                return r

    qmp("qmp_capabilities")
    r = qmp("human-monitor-command", {"command-line": "info status"})
    check(r == {"return": "VM status: paused (prelaunch)\r\n"}, "hmc info status: %r" % r)
    r = qmp("human-monitor-command", {"command-line": "stop now"})
    check(r == {"return": "stop|s: extraneous characters at the end of line\r\n"
                          "Try \"help stop\" for more information\r\n"}, "hmc error: %r" % r)
    r = qmp("human-monitor-command", {"command-line": "qom-set /machine/peripheral/vd0 "
                                                      "x-data-plane on"})
    check(r == {"return": ""}, "hmc qom-set: %r" % r)
    r = qmp("qom-get", {"path": "/machine/peripheral/vd0", "property": "x-data-plane"})
    check(r == {"return": True}, "hmc switched the path: %r" % r)
    r = qmp("human-monitor-command", {"command-line": ""})
    check(r == {"return": ""}, "hmc empty: %r" % r)
    r = qmp("human-monitor-command", {})
    check(r.get("error", {}).get("desc") == "Parameter 'command-line' is missing", "hmc args")
    qmp("quit")
    p.wait(timeout=10)


def pty_test(helper, tmp):
    """-monitor stdio on a terminal: raw mode (one echo, keys as typed), and
    the terminal back in canonical mode with echo after the monitor ends."""
    import pty
    img = os.path.join(tmp, "pty.img")
    with open(img, "wb") as f:
        f.truncate(1 << 20)
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["HMP_MONITOR"] = "stdio"
        os.execvp("sh", ["sh", "-c", "stty sane; '%s' drive id=drive0,file=%s,format=raw vd0; "
                         "stty -a" % (helper, img)])
    buf = b""

    def until(marker, timeout=10):
        nonlocal buf
        import select
        end = time.time() + timeout
        while marker not in buf:
            r, _, _ = select.select([fd], [], [], max(0, end - time.time()))
            if not r:
                raise TimeoutError("no %r in %r" % (marker, buf[-300:]))
            try:
                d = os.read(fd, 4096)
            except OSError:
                d = b""
            if not d:
                raise EOFError("pty closed; got %r" % buf[-300:])
            buf += d
        i = buf.index(marker) + len(marker)
        out, buf = buf[:i], buf[i:]
        # the terminal keeps output processing (OPOST), as QEMU's stdio: CR LF becomes CR CR LF
        return out.replace(b"\r\r\n", b"\r\n")

    try:
        until(PROMPT)
        os.write(fd, b"info statux\x7fs\r")
        out = until(PROMPT)
        check(out == b"info statux\b \bs\r\nVM status: paused (prelaunch)\r\n(qemu) ",
              "pty: one echo, backspace, output: %r" % out)
        os.write(fd, b"\x1b[A\r")
        until(PROMPT)
        out = until(PROMPT)
        check(out.endswith(b"VM status: paused (prelaunch)\r\n(qemu) "), "pty history: %r" % out)
        os.write(fd, b"quit\r")
        stty = b""
        try:
            until(b"\0", timeout=10)  # never comes: read all stty prints, up to EOF
        except (EOFError, TimeoutError):
            stty = buf
        check(b"-icanon" not in stty and b"icanon" in stty and b" echo " in stty,
              "pty: terminal restored: %r" % stty[:200])
    except Exception as e:  # noqa: BLE001
        check(False, "pty: %s" % e)
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    os.waitpid(pid, 0)
    os.close(fd)


# ---- the transcript against QEMU ----------------------------------------------

COMMON = [
    "info status", "stop", "info status", "cont", "info status", "stop", "info status",
    "info block", "info block -v", "info block -v drive0", "info qtree",
    "info block drive0", "info block nope", "info blockstats", "info iothreads",
    "info version",
    "qom-get /machine/peripheral/vd0 drive", "qom-get /machine/peripheral/vd0 config-wce",
    "qom-get /machine/peripheral/vd0 queue-size", "qom-get /machine/peripheral/vd0 iothread",
    "qom-get /machine/peripheral/vd0 virtio-backend",
    "qom-get /machine/peripheral/vd0 x", "qom-get /nope x", "qom-list /nope", "qom-list",
    "qom-get /machine/peripheral/vd0", "qom-get \"/machine",
    "qom-get \"/machine/peripheral/vd0\" \"queue-size\"",
    "qom-set /machine/peripheral/vd0 nope 1",
    "qom-set /machine/peripheral/vd0 config-wce off",
    "qom-set /machine/peripheral/vd0 bootindex abc", "qom-set /machine/peripheral/vd0 bootindex",
    "qom-set /machine/peripheral/vd0 bootindex 3", "qom-get /machine/peripheral/vd0 bootindex",
    "qom-set -j /machine/peripheral/vd0 bootindex 4", "qom-get /machine/peripheral/vd0 bootindex",
    "block_resize nodev 1M", "block_resize", "block_resize drive0", "block_resize drive0 abc",
    "block_resize drive0 -5", "block_resize drive0 128M",
    "block_set_io_throttle nodev 1 1 1 1 1 1", "block_set_io_throttle drive0 1 1",
    "block_set_io_throttle drive0 -1 0 0 0 0 0", "block_set_io_throttle drive0 1 1 0 0 0 0",
    "block_set_io_throttle drive0 0x10 0 0 1a 0 0", "block_set_io_throttle drive0 12abc 0 0 0 0 0",
    "block_set_io_throttle drive0 1000 0 0 100 0 0", "info block",
    "block_set_io_throttle drive0 0 0 0 0 0 0", "info block",
    "foo", "info foo", "stop now", "info status extra", "   ", "help nosuch",
    "help qom-get", "help stop", "help block_resize", "help block_set_io_throttle",
    "help info status", "help info block", "help quit", "system_powerdown", "system_reset",
    "info status",
]
BLOCKDEV = ["info block", "info block -v", "info qtree", "info blockstats", "block_set_io_throttle vd0/virtio-backend 0 0 0 5 0 0",
            "info block"]

# (config, command) -> reason.  Lines of these outputs may differ.
KNOWN = {
    ("drive", "info version"): "vblk reports 7.2.0 with its own package string",
    ("blockdev", "info block"): "the throttle group of a -blockdev device is the device id in vblk",
    ("drive", "qom-get \"/machine"): "QEMU ends 'unterminated string' with a bare LF, vblk with CR LF",
}
# info qtree: only the virtio-blk-pci device's subtree is compared (the helper
# has no machine: no host bridge function, ISA bus, ...), and in it these lines
# may differ: the helper's device is on no PCI bus (addr <unset>, no class or
# BAR lines), and a real vblk's BARs are all memory (no legacy I/O BAR 0).
QTREE_PCI_LINES = re.compile(r"^\s*(addr = |class (?!=)|bar \d+: )")
HELP_PREFIX_ONLY = "help texts are vblk's own words; the synopsis before ' -- ' must match"


def normalise(lines):
    out = []
    for l in lines:
        l = re.sub(r"#block\d+", "#blockN", l)
        l = re.sub(r"thread_id=\d+", "thread_id=N", l)
        out.append(l)
    return out


def run_qemu(cmds, args, cwd):
    p = subprocess.Popen([QEMU, "-M", "pc", "-nodefaults", "-S", "-display", "none"] + args +
                         ["-monitor", "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, cwd=cwd)
    return collect(p, cmds)


def run_vblk(helper, cmds, args, cwd):
    p = subprocess.Popen([helper] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, cwd=cwd, env=helper_env("stdio"))
    return collect(p, cmds)


def collect(p, cmds):
    h = Hmp(proc=p)
    h.until()
    outs = [normalise(h.cmd(c)) for c in cmds]
    h.send(b"quit\n")
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return outs


def qtree_device(lines):
    """The lines of the first virtio-blk-pci device in info qtree, with its children."""
    out, indent = [], None
    for l in lines:
        depth = len(l) - len(l.lstrip(" "))
        if indent is None:
            if l.lstrip().startswith("dev: virtio-blk-pci,"):
                indent = depth
                out.append(l[depth:])
            continue
        if depth <= indent:
            break
        out.append(l[indent:])
    return out


def compare(config, cmds, q, v):
    known = []
    for c, a, b in zip(cmds, q, v):
        if c == "info qtree":
            a, b = qtree_device(a), qtree_device(b)
            check(len(a) > 40, "[%s] info qtree: QEMU's virtio-blk-pci subtree %r" % (config, a))
            pa = [l for l in a if QTREE_PCI_LINES.match(l)]
            pb = [l for l in b if QTREE_PCI_LINES.match(l)]
            if pa != pb:
                known.append((c, "the helper's device is on no PCI bus (addr, class, BAR lines)",
                              pa, pb))
            a = [l for l in a if not QTREE_PCI_LINES.match(l)]
            b = [l for l in b if not QTREE_PCI_LINES.match(l)]
        if c.startswith("help ") and a and b and not a[0].startswith("unknown"):
            ok = [x.split(" -- ")[0] for x in a[:1]] == [y.split(" -- ")[0] for y in b[:1]]
            check(ok, "[%s] %s: synopsis %r vs %r" % (config, c, a[:1], b[:1]))
            continue
        if a == b:
            continue
        if (config, c) in KNOWN:
            known.append((c, KNOWN[(config, c)], a, b))
            continue
        check(False, "[%s] %s:\n    QEMU: %r\n    vblk: %r" % (config, c, a, b))
    for c, why, a, b in known:
        print("known difference [%s] %s: %s\n    QEMU: %r\n    vblk: %r" % (config, c, why, a, b))


def transcript(helper, tmp):
    if not QEMU:
        print("SKIP transcript: qemu-system-x86_64 not installed")
        return
    dirs = {}
    for who in ("qemu", "vblk"):
        d = os.path.join(tmp, who)
        os.mkdir(d)
        with open(os.path.join(d, "d.img"), "wb") as f:
            f.truncate(64 << 20)
        dirs[who] = d
    q = run_qemu(COMMON, ["-object", "iothread,id=io0", "-drive",
                          "if=none,id=drive0,file=d.img,format=raw", "-device",
                          "virtio-blk-pci,id=vd0,drive=drive0,iothread=io0"], dirs["qemu"])
    v = run_vblk(helper, COMMON, ["drive", "id=drive0,file=d.img,format=raw", "vd0", "io0"],
                 dirs["vblk"])
    compare("drive", COMMON, q, v)
    q = run_qemu(BLOCKDEV, ["-blockdev", "driver=file,node-name=f0,filename=d.img", "-blockdev",
                            "driver=raw,node-name=disk0,file=f0", "-device",
                            "virtio-blk-pci,id=vd0,drive=disk0"], dirs["qemu"])
    v = run_vblk(helper, BLOCKDEV, ["blockdev", "driver=raw,node-name=disk0,file.driver=file,"
                                    "file.filename=d.img", "vd0"], dirs["vblk"])
    compare("blockdev", BLOCKDEV, q, v)


def main():
    helper = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="hmp-") as tmp:
        socket_tests(helper, tmp)
        write_and_close_tests(helper, tmp)
        telnet_test(helper, tmp)
        hmc_test(helper, tmp)
        pty_test(helper, tmp)
        transcript(helper, tmp)
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        return 1
    print("all HMP checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
