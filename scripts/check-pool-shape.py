#!/usr/bin/env python3
"""The shape pool/ keeps (docs/design.md, "The pool's layers"): no source file over 800 lines, no
function over 100 lines, and no test that reaches into a src/ folder of pool/. Prints each breach
as FILE:LINE: what, and exits 1 if there is one.

A function is found by its braces: an opening brace after a parameter list (`) {`, `) const {`,
`) -> T {`, a constructor's initialiser list), outside any other function's body; lambdas and
local classes count towards the function they are in. Comments, strings and raw strings are
skipped. Usage: check-pool-shape.py [SOURCE_ROOT]"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
CONTROL = re.compile(r'\b(if|for|while|switch|catch|do|else)\b\s*(\(.*\))?\s*$')


def strip_code(text):
    """The text with comments and string contents blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = ')' + m.group(1) + '"'
            j = text.find(end, i + m.end()); j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r'[^\n]', ' ', text[i + 2:j])); i = j
        elif c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 86'400
            out.append(c); i += 1
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def functions(code):
    """(first line, line count, header) of each outermost function body in stripped code."""
    found, depth, fn_depth, start, header = [], 0, None, 0, ''
    line = 1
    for i, c in enumerate(code):
        if c == '\n':
            line += 1
        elif c == '{':
            if fn_depth is None:
                before = code[max(0, i - 400):i]
                stmt = re.split(r'[;{}]', before)[-1].strip()
                flat = ' '.join(stmt.split())
                is_fn = (re.search(r'\)\s*(const|noexcept|override|final|mutable|\s)*(->\s*[\w:<>,\s*&]+)?$', flat)
                         or re.search(r'\)\s*:\s*\w.*\)$', flat) or re.search(r'\)\s*:\s*\w.*\}$', flat))
                if is_fn and not CONTROL.search(flat) and not re.search(r'\]\s*\(', flat) \
                        and not re.match(r'^(namespace|class|struct|enum|union|extern)\b', flat) \
                        and not re.search(r'(^|[=(,])\s*[\w:<>]*\s*\($', flat):
                    fn_depth, start, header = depth, line, flat[-90:]
            depth += 1
        elif c == '}':
            depth -= 1
            if fn_depth is not None and depth == fn_depth:
                found.append((start, line - start + 1, header))
                fn_depth = None
    return found


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    problems = []
    for base, dirs, files in os.walk(os.path.join(root, 'pool')):
        for name in sorted(files):
            if not name.endswith(('.cpp', '.hpp')):
                continue
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            text = open(path, encoding='utf-8').read()
            lines = text.count('\n')
            if lines > MAX_FILE_LINES:
                problems.append(f'{rel}:1: {lines} lines (at most {MAX_FILE_LINES}: split it by what it holds)')
            for start, length, header in functions(strip_code(text)):
                if length > MAX_FUNCTION_LINES:
                    problems.append(f'{rel}:{start}: a function of {length} lines (at most '
                                    f'{MAX_FUNCTION_LINES}): {header}')
    include_src = re.compile(r'pool/[a-z_]+/src\b|pool/src\b')
    for base, dirs, files in os.walk(os.path.join(root, 'tests')):
        for name in sorted(files):
            if name == 'CMakeLists.txt' or name.endswith(('.cpp', '.hpp')):
                path = os.path.join(base, name)
                for k, text in enumerate(open(path, encoding='utf-8'), 1):
                    if include_src.search(text) and ('include' in text):
                        problems.append(f'{os.path.relpath(path, root)}:{k}: a test reaches into pool/\'s '
                                        f'src/ (use the layer\'s public headers or a test seam)')
    for p in problems:
        print(p)
    print(f'{len(problems)} breach(es) of pool/\'s shape' if problems else "pool/'s shape holds")
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
