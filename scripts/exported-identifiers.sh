#!/bin/sh
# Prints "package count" for every importable (not internal, not main) package
# of the main module, then "TOTAL n": the exported identifiers a user
# program can name or call. It counts exported package-level constants,
# variables, functions and types, plus the exported methods in each
# exported type's method set (value and pointer receivers, promoted
# methods, an interface's methods; an alias counts the methods of the type
# it stands for). Struct fields are not counted. See
# internal/tools/exportcount. Arguments: -v to list the identifiers, and
# package patterns (default ./...).
set -eu
cd "$(dirname "$0")/.."
CGO_ENABLED=0 exec go run ./internal/tools/exportcount "$@"
