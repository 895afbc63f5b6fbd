#!/usr/bin/env python3
"""Write docs/api.md from include/ringcc.h: the header is the reference, this only lays it out.

    tools/gen-api-doc.py include/ringcc.h > docs/api.md      # regenerate
    tools/gen-api-doc.py --check include/ringcc.h docs/api.md # exit 1 when stale (test 'apidoc')

Banner comments ("/* ----- / * Title") become sections; each other comment goes with the
declarations that follow it up to the next blank line, shown as C. Include guards, the
extern "C" wrapper and the visibility macro are left out.
"""
import argparse
import re
import sys

BOILERPLATE = re.compile(r'^(#ifndef RINGCC_H|#define RINGCC_H|#endif /\* RINGCC_H \*/|'
                         r'#ifdef __cplusplus|extern "C" \{|\}|#endif|#include <.*>)\s*$')


def comment_text(lines):
    out = []
    for line in lines:
        line = re.sub(r"^\s*/\*+ ?", "", line)
        line = re.sub(r"\s*\*+/\s*$", "", line)
        line = re.sub(r"^\s*\* ?", "", line)
        out.append(line.rstrip())
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


def parse(text):
    """Yields ('section', title, body lines), ('doc', comment lines, code lines)."""
    lines = text.splitlines()
    i, comment, code, skipped = 0, [], [], False

    def flush():
        nonlocal comment, code, skipped
        # A comment over left-out lines only (the visibility macro) goes with them.
        item = [("doc", comment, code)] if code or (comment and not skipped) else []
        comment, code, skipped = [], [], False
        return item

    items = []
    # The RCC_API visibility block is build plumbing, not API.
    skip_api = re.compile(r"^#(if defined\(__GNUC__\)|define RCC_API|else|endif)(\s|$)")
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("/*") and not code:
            block = [line]
            while "*/" not in lines[i]:
                i += 1
                block.append(lines[i])
            i += 1
            if re.match(r"^/\* -{10,}", block[0]):
                items += flush()
                body = comment_text(block[1:])
                title = body.pop(0) if body else ""
                items.append(("section", title, body))
            else:
                items += flush()
                comment = comment_text(block)
            continue
        if not line.strip():
            items += flush()
        elif BOILERPLATE.match(line) or skip_api.match(line):
            skipped = True
        else:
            code.append(line)
        i += 1
    items += flush()
    return items


def render(items):
    out = ["# API reference", "",
           "Generated from `include/ringcc.h` by `tools/gen-api-doc.py` (the test `apidoc` "
           "fails when this page is stale); the header is the authority. Every function "
           "that can fail returns an `rcc_result_t`; `rcc_strerror` gives its text and "
           "`rcc_last_error` the detail.", ""]
    first = True
    for item in items:
        if item[0] == "section":
            _, title, body = item
            out += ["## " + title, ""] + ([*body, ""] if body else [])
            continue
        _, comment, code = item
        if first and comment and not code:  # the header's opening comment
            out += ["## Overview", ""] + comment + [""]
            first = False
            continue
        first = False
        if comment:
            out += comment + [""]
        if code:
            out += ["```c"] + code + ["```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with DOC instead of printing")
    ap.add_argument("header")
    ap.add_argument("doc", nargs="?")
    args = ap.parse_args()
    with open(args.header) as f:
        text = render(parse(f.read()))
    if not args.check:
        sys.stdout.write(text)
        return
    if not args.doc:
        ap.error("--check needs the DOC to compare with")
    with open(args.doc) as f:
        current = f.read()
    if current != text:
        sys.exit("%s is stale: regenerate it with tools/gen-api-doc.py %s > %s"
                 % (args.doc, args.header, args.doc))
    print("ok: %s matches %s" % (args.doc, args.header))


if __name__ == "__main__":
    main()
