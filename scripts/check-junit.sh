#!/usr/bin/env bash
# Checks JUnit XML reports as CI servers read them: each file is validated against the JUnit
# schema Maven Surefire writes and Jenkins, GitLab and pytest follow (`junit-10.xsd`, taken
# from pytest's source distribution on PyPI, where pytest's own tests validate against it), then
# read with junitparser (PyPI), a JUnit reader. Prints one line per file:
#   FILE tests=N failures=F errors=E skipped=S
# counted by the reader from the test cases it found. Installs both into a virtualenv under
# ${XDG_CACHE_HOME:-$HOME/.cache}/kanon/ on first use.
#
# usage: scripts/check-junit.sh FILE...
# Exits 1 when a report does not validate or cannot be read, 2 when the tools cannot be set up.
set -euo pipefail

PYTEST_VERSION="${PYTEST_VERSION:-8.3.3}"
XMLSCHEMA_VERSION="${XMLSCHEMA_VERSION:-4.3.2}"
JUNITPARSER_VERSION="${JUNITPARSER_VERSION:-5.0.3}"

[ "$#" -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/kanon/junit-check-${XMLSCHEMA_VERSION}-${JUNITPARSER_VERSION}"
python="$cache/venv/bin/python"
schema="$cache/junit-10-pytest-${PYTEST_VERSION}.xsd"

if ! "$python" -c 'import xmlschema, junitparser' >/dev/null 2>&1; then
    command -v python3 >/dev/null || { echo "error: python3 is required" >&2; exit 2; }
    echo "installing xmlschema ${XMLSCHEMA_VERSION} and junitparser ${JUNITPARSER_VERSION} into $cache/venv" >&2
    rm -rf "$cache/venv"
    mkdir -p "$cache"
    python3 -m venv "$cache/venv" || {
        echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 2
    }
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check \
        "xmlschema==${XMLSCHEMA_VERSION}" "junitparser==${JUNITPARSER_VERSION}" || exit 2
fi
if [ ! -s "$schema" ]; then
    echo "fetching junit-10.xsd from pytest ${PYTEST_VERSION}'s source distribution" >&2
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$cache/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --no-binary :all: "pytest==${PYTEST_VERSION}" -d "$work" || exit 2
    tar -xzf "$work/pytest-${PYTEST_VERSION}.tar.gz" -C "$work" \
        "pytest-${PYTEST_VERSION}/testing/example_scripts/junit-10.xsd" || exit 2
    cp "$work/pytest-${PYTEST_VERSION}/testing/example_scripts/junit-10.xsd" "$schema.part"
    mv "$schema.part" "$schema"
fi

exec "$python" - "$schema" "$@" <<'PY'
import sys

import junitparser
import xmlschema

schema = xmlschema.XMLSchema(sys.argv[1])
status = 0
for path in sys.argv[2:]:
    try:
        schema.validate(path)
    except xmlschema.XMLSchemaValidationError as e:
        print(f"{path}: does not validate against junit-10.xsd: {e.reason} at {e.path}", file=sys.stderr)
        status = 1
        continue
    report = junitparser.JUnitXml.fromfile(path)
    tests = failures = errors = skipped = 0
    for suite in report:
        for case in suite:
            tests += 1
            for result in case.result:
                if isinstance(result, junitparser.Failure):
                    failures += 1
                elif isinstance(result, junitparser.Error):
                    errors += 1
                elif isinstance(result, junitparser.Skipped):
                    skipped += 1
    print(f"{path} tests={tests} failures={failures} errors={errors} skipped={skipped}")
sys.exit(status)
PY
