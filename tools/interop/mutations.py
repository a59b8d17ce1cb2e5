#!/usr/bin/env python3
"""Shows that the spec vectors can fail: for each rule of check.RULES (a MUST of spec/tokens.md,
spec/envelope.md, spec/ratchet.md, spec/attachments.md or, in group_vectors.RULES, spec/groups.md), turns the rule off in check.py's reader and requires at
least one case of spec/vectors/{tokens,envelopes,bundles,sessions,files,groups}.json to fail then. A rule no vector notices is a gap in the
vectors, reported as a failure.

    mutations.py        (python with PyNaCl and pyseto, as check.py)

Prints one line per rule and exits 1 if a rule went unnoticed or the vectors fail with every rule on.
"""
import contextlib, io, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402
import group_vectors  # noqa: E402


def failures():
    """Cases of the project's own vector files that the reader gets wrong, as it stands."""
    check.RESULTS.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check.check_token_vectors(os.path.join(check.VECTORS, "tokens.json"), "tokens")
        check.check_envelope_vectors(os.path.join(check.VECTORS, "envelopes.json"), "envelopes")
        check.check_bundle_vectors(os.path.join(check.VECTORS, "bundles.json"))
        check.check_session_vectors(os.path.join(check.VECTORS, "sessions.json"))
        check.check_file_vectors(os.path.join(check.VECTORS, "files.json"))
        check.check_group_vectors(os.path.join(check.VECTORS, "groups.json"), check.check, check.jload, check.body_outcome)
    return [line for line in out.getvalue().splitlines() if line.startswith("FAIL")]


def main():
    ok = True
    baseline = failures()
    if baseline:
        print(f"FAIL the vectors fail with every rule on: {baseline[:3]}")
        return 1
    for rules, rule in [(check.RULES, r) for r in check.RULES] + [(group_vectors.RULES, r) for r in group_vectors.RULES]:
        rules[rule] = False
        try:
            failed = failures()
        finally:
            rules[rule] = True
        ok &= bool(failed)
        first = failed[0][5:].split(":")[0] if failed else ""
        print(f"PASS {rule} off: {len(failed)} vector check(s) fail, e.g. {first}" if failed
              else f"FAIL {rule} off: every vector still passes")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
