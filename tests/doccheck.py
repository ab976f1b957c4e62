#!/usr/bin/env python3
"""Citation check: the docs and the code comments cite only what a reader can
open in this repository (issue 9, item 9). Read are README.md, docs/**.md and
the comments of src/, include/, tests/, fuzz/ and scripts/ (C: /* */ and //;
shell, Python, meson: #). Checked are:

  - repository paths: tokens that start with src/, include/, tests/, docs/,
    scripts/, fuzz/ or .ci/ (not inside a longer path such as build/tests/...).
    They must exist; a token with * ? or [ is a glob and must match something;
    {a,b} expands to each alternative;
  - relative references that leave the folder (../x) and Markdown links
    [text](path): resolved from the citing file's folder;
  - bare Markdown file names (anchors.md): a file of that name in the citing
    file's folder, docs/ or the top;
  - section citations (X §n): X must be a specification (virtio, PCI, ACPI,
    optionally with a version: "virtio 1.2 §5.2") or a Markdown file of the
    repository; "anchors §8.9" cites a document a reader cannot open;
  - absolute paths into the development machine's workspace (/work/...).

Usage: doccheck.py [ROOT]          check the tree at ROOT (default: ..)
       doccheck.py --self-test [ROOT]
                                   add broken citations to a copy of the tree
                                   and show that the check reports exactly those
"""
import glob
import os
import re
import shutil
import sys
import tempfile

PREFIXES = ("src", "include", "tests", "docs", "scripts", "fuzz", ".ci")
CODE_DIRS = ("src", "include", "tests", "fuzz", "scripts")
C_EXT = (".c", ".h")
HASH_EXT = (".sh", ".py", ".build", ".txt")
SKIP_DIRS = {".git", "corpus", "__pycache__"}

# A repository path: a prefix, then path characters. Not preceded by anything
# that would make it the tail of a longer path or word (build/tests/x, $dir/x).
PATH_RE = re.compile(
    r"(?<![\w./$~-])((?:%s)/[\w.*?\[\]{},/+-]*)" % "|".join(re.escape(p) for p in PREFIXES))
UP_RE = re.compile(r"(?<![\w./$~-])((?:\.\./)+[\w.*?/+-]+)")
MDLINK_RE = re.compile(r"\]\(([^)\s]+)\)")
MDNAME_RE = re.compile(r"(?<![\w./$~-])(?<!\]\()([\w-]+\.md)\b")  # not a link target
SECTION_RE = re.compile(r"([\w.-]+)\s+(?:\d[\d.]*\s+)?§")
SPECS = {"virtio", "pci", "acpi", "spec", "specification"}
WORKSPACE_RE = re.compile(r"(?<![\w.-])(/work/[\w./-]*)")


def comments_c(text):
    """(line, comment text) of every /* */ and // comment, skipping literals."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            body = text[i + 2:j]
            for k, part in enumerate(body.split("\n")):
                out.append((line + k, part))
            line += body.count("\n")
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        else:
            i += 1
    return out


def comments_hash(text):
    """(line, text after a # that starts a comment): at the line start or after a blank."""
    out = []
    for lineno, l in enumerate(text.split("\n"), 1):
        m = re.search(r"(^|\s)#(.*)$", l)
        if m and not l.lstrip().startswith("#!"):
            out.append((lineno, m.group(2)))
    return out


def expand_braces(tok):
    m = re.search(r"\{([^{}]*)\}", tok)
    if not m:
        return [tok]
    res = []
    for alt in m.group(1).split(","):
        res += expand_braces(tok[:m.start()] + alt + tok[m.end():])
    return res


def exists(root, rel):
    """@rel (relative to @root) names a file or folder, or is a glob that matches one."""
    for t in expand_braces(rel):
        path = os.path.normpath(os.path.join(root, t))
        if not (path == root or path.startswith(root + os.sep)):
            return False  # outside the repository
        if any(ch in t for ch in "*?["):
            if not glob.glob(path):
                return False
        elif not os.path.exists(path):
            return False
    return True


def clean(tok):
    # Sentence punctuation is not part of the path.
    return tok.rstrip(".,:;-")


def check_text(root, rel, pieces, markdown):
    errors = []
    here = os.path.dirname(rel)
    for lineno, text in pieces:
        for m in PATH_RE.finditer(text):
            tok = clean(m.group(1))
            if tok.startswith("build/") or tok.endswith("/") and tok.count("/") == 1:
                continue  # a top folder named alone ("src/")
            if not exists(root, tok):
                errors.append(f"{rel}:{lineno}: cites {tok}, which is not in the repository")
        for m in UP_RE.finditer(text):
            tok = clean(m.group(1))
            if not exists(root, os.path.join(here, tok)):
                errors.append(f"{rel}:{lineno}: cites {tok}, which is not in the repository")
        if markdown:
            for m in MDLINK_RE.finditer(text):
                target = m.group(1).split("#", 1)[0]
                if not target or re.match(r"^[a-z]+:", target) or target.startswith(PREFIXES):
                    continue  # web links, anchors; repository paths are checked above
                if not exists(root, os.path.join(here, target)):
                    errors.append(f"{rel}:{lineno}: links to {target}, which is not in the repository")
        for m in SECTION_RE.finditer(text):
            doc = m.group(1)
            if doc.lower() not in SPECS and not doc.endswith(".md"):
                errors.append(f"{rel}:{lineno}: cites a section of {doc}, which is not in the repository")
        for m in WORKSPACE_RE.finditer(text):
            errors.append(f"{rel}:{lineno}: cites {clean(m.group(1))}, which is not in the repository")
        for m in MDNAME_RE.finditer(text):
            name = m.group(1)
            if not any(os.path.exists(os.path.join(root, d, name)) for d in (here, "docs", "")):
                errors.append(f"{rel}:{lineno}: cites {name}, which is not in the repository")
    return errors


def files(root):
    yield "README.md", True
    for dp, dirs, fs in os.walk(os.path.join(root, "docs")):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for f in sorted(fs):
            if f.endswith(".md"):
                yield os.path.relpath(os.path.join(dp, f), root), True
    for top in CODE_DIRS:
        for dp, dirs, fs in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for f in sorted(fs):
                yield os.path.relpath(os.path.join(dp, f), root), False


def check(root):
    root = os.path.abspath(root)
    errors, n = [], 0
    for rel, markdown in files(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        if markdown:
            pieces = list(enumerate(text.split("\n"), 1))
        elif rel.endswith(C_EXT):
            pieces = comments_c(text)
        elif rel.endswith(HASH_EXT) or "." not in os.path.basename(rel):
            pieces = comments_hash(text)  # scripts without an extension are shell
        else:
            continue
        n += 1
        errors += check_text(root, rel, pieces, markdown)
    return errors, n


def self_test(root):
    root = os.path.abspath(root)
    tmp = tempfile.mkdtemp(prefix="doccheck-")
    try:
        for d in ("README.md",) + PREFIXES:
            src = os.path.join(root, d)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(tmp, d), symlinks=True,
                                ignore=shutil.ignore_patterns("build*", ".git"))
            elif os.path.exists(src):
                shutil.copy(src, tmp)
        errors, _ = check(tmp)
        if errors:
            print("self-test: the unmodified tree already fails:", *errors, sep="\n  ")
            return 1
        # Broken citations of every kind, next to good ones that must pass.
        with open(os.path.join(tmp, "docs", "architecture.md"), "a") as fh:
            fh.write("\nSee src/virtio/gone.c, src/ioq/ioq*.c, src/ioq/nothing*.c,"
                     " [this](../README.md), [that](missing.md), virtio 1.2 §2.7,"
                     " ../shared/anchors.md §8.9, anchors §8.9 and anchors.md §8.\n")
        with open(os.path.join(tmp, "src", "virtio", "virtqueue.c"), "a") as fh:
            fh.write('\n/* as tests/virtio/{test-hostile,gone}.c and build/tests/x do */\n'
                     '// seeds from /work/shared/seeds\n'
                     'static const char *doccheck_s = "tests/not-a-comment.c";\n')
        errors, _ = check(tmp)
        want = {"docs/architecture.md: cites src/virtio/gone.c",
                "docs/architecture.md: cites src/ioq/nothing*.c",
                "docs/architecture.md: links to missing.md",
                "docs/architecture.md: cites ../shared/anchors.md",
                "docs/architecture.md: cites anchors.md",
                "docs/architecture.md: cites a section of anchors",
                "src/virtio/virtqueue.c: cites /work/shared/seeds",
                "src/virtio/virtqueue.c: cites tests/virtio/{test-hostile,gone}.c"}
        got = {re.sub(r":\d+:", ":", e).split(", which")[0] for e in errors}
        if got != want:
            print("self-test: reported", sorted(got), "wanted", sorted(want), sep="\n  ")
            return 1
        print("self-test: the broken citations were caught:", *errors, sep="\n  ")
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    args = sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if args and args[0] == "--self-test":
        return self_test(args[1] if len(args) > 1 else root)
    if args:
        root = args[0]
    errors, n = check(root)
    for e in errors:
        print(e)
    print(f"doccheck: {n} files read, {len(errors)} citations of files not in the repository")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
