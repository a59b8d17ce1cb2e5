#!/usr/bin/env python3
"""Independent implementation of Mailslot's formats, written from spec/ alone.

Reads only spec/tokens.md, spec/envelope.md, spec/ratchet.md, spec/attachments.md, spec/push.md and spec/vectors/*.json (no Swift source), with
PyNaCl (libsodium) and pyseto (PASETO). It checks the project's vectors, cross-checks the
`mailslot-relay` binary (tokens minted by each side, verified by the other), and with
--write-independent writes spec/vectors/independent/{envelopes,tokens,sessions}.json from this code.

    check.py --relay-binary PATH [--write-independent]

Prints `PASS name` / `FAIL name: why` per check, then `N passed, M failed`; exits 1 on failure.
"""
import argparse, base64, calendar, decimal, hashlib, hmac, json, math, os, re, subprocess, sys, tempfile, time

import nacl.bindings, nacl.exceptions, nacl.public, nacl.signing
import pyseto
from group_vectors import GroupError, check_group_vectors, validate_group_body
from pyseto import Key

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VECTORS = os.path.join(ROOT, "spec", "vectors")

# ---------------------------------------------------------------- reporting

RESULTS = []


def check(name, ok, why=""):
    RESULTS.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)
    return ok


def expect_outcome(name, got, want):
    """got/want are outcome strings ("ok" or an error code)."""
    return check(name, got == want, f"got {got}, expected {want}")


# ---------------------------------------------------------------- common conventions

# Every MUST that the vectors exercise, as a switch: all on here. tools/interop/mutations.py turns
# each off in turn and requires some vector of spec/vectors/ to fail then, so that no vector set
# passes a reader that ignores a rule.
RULES = dict.fromkeys([
    "duplicate_names", "byte_order_mark", "number_length", "depth", "surrogates", "binary64",
    "days_in_month", "gregorian_leap_years", "clock_ranges", "time_fraction", "bundle_check_5",
    "bundle_check_5a", "typing_payload", "number_format", "smallest_class", "timestamp_int64", "timestamp_negative_zero",
    "utf8_member_order", "reencode_drops_unknown",
    # spec/ratchet.md
    "bundle_v2_members", "bundle_v2_prekey_id", "bundle_v2_prekey_low_order", "session_id", "signed_prekey_id_nonzero",
    "unknown_one_time_prekey", "ciphertext_min_length", "stale_retired_keys", "stale_old_number", "skip_to_previous_chain_length",
    "max_skip", "skipped_key_lifetime", "max_skipped_keys", "retired_key_bound", "max_message_number", "missing_chain_key",
    "prekeys_before_session_id",
    # spec/attachments.md: opening an encrypted file (§2) and the reference in the chat message (§3)
    "file_size_formula", "file_shorter", "file_longer", "file_digest", "file_early_final", "file_other_tag",
    "file_final_required", "file_padding", "file_padding_after_decrypt",
    "ref_files_count", "ref_type_file", "ref_blob_id", "ref_key_length", "ref_digest_length", "ref_size_formula",
    "ref_plain_size_range", "ref_media_type", "ref_name_length", "ref_preview_length", "ref_preview_media_type",
], True)


class FormatError(Exception):
    def __init__(self, code, detail=""):
        super().__init__(code)
        self.code, self.detail = code, detail


def b64e(b):
    """Unpadded base64url (tokens.md §1, envelope.md §1)."""
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


_B64 = re.compile(r"[A-Za-z0-9_-]*")
_B64VAL = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def b64d(s):
    """Strict unpadded base64url: alphabet only, len % 4 != 1, canonical trailing bits
    (tokens.md §1, envelope.md §1). Raises ValueError."""
    if not isinstance(s, str) or not _B64.fullmatch(s) or len(s) % 4 == 1:
        raise ValueError("not strict base64url")
    if len(s) % 4 and _B64VAL[s[-1]] & (0x0F if len(s) % 4 == 2 else 0x03):
        raise ValueError("non-canonical trailing bits")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def valid_uid(u):
    """1-128 bytes of A-Z a-z 0-9 . _ -, not '.' or '..' (tokens.md §1, envelope.md §1)."""
    return isinstance(u, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,128}", u) is not None and u not in (".", "..")


def valid_message_id(m):
    """16-64 bytes of A-Z a-z 0-9 _ - (envelope.md §1)."""
    return isinstance(m, str) and re.fullmatch(r"[A-Za-z0-9_-]{16,64}", m) is not None


_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                      r"(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})")


def parse_time(s):
    """RFC 3339 per tokens.md §1: grammar, 20-64 bytes, real date, no leap second, offset
    hours < 24 and minutes < 60. Returns epoch seconds as a float, or None."""
    if not isinstance(s, str) or not 20 <= len(s.encode()) <= 64:
        return None
    m = _RFC3339.fullmatch(s)
    if not m:
        return None
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    # Proleptic Gregorian: year 0000 is a leap year like 2000 (the spec does not bound the year).
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) if RULES["gregorian_leap_years"] else y % 4 == 0
    mdays = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] if RULES["days_in_month"] else [31] * 12
    if not 1 <= mo <= 12 or not 1 <= d <= mdays[mo - 1]:
        return None
    if RULES["clock_ranges"] and (h >= 24 or mi >= 60 or sec >= 60):
        return None
    off = 0
    if m.group(8) not in ("Z", "z"):
        oh, om = int(m.group(8)[1:3]), int(m.group(8)[4:6])
        if RULES["clock_ranges"] and (oh >= 24 or om >= 60):
            return None
        off = (oh * 60 + om) * 60 * (1 if m.group(8)[0] == "+" else -1)
    # days from civil (proleptic Gregorian), independent of the platform's time functions
    yy = y - (mo <= 2)
    era = yy // 400
    yoe = yy - era * 400
    doy = (153 * (mo + (-3 if mo > 2 else 9)) + 2) // 5 + d - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    whole = days * 86400 + h * 3600 + mi * 60 + sec - off
    # The fraction is accumulated digit by digit in binary64, not read as one decimal (§1).
    fraction, scale = 0.0, 0.1
    for digit in (m.group(7) or ".")[1:]:
        fraction = fraction + int(digit) * scale
        scale = scale / 10
    if not RULES["time_fraction"]:
        fraction = float("0" + m.group(7)) if m.group(7) else 0.0
    return float(whole) + fraction


def fmt_time(t, offset_minutes=0, t_sep="T", z=None, frac=""):
    """Writes an RFC 3339 time (the minter's form by default: whole seconds, +00:00)."""
    local = time.gmtime(t + offset_minutes * 60)
    sign = "+" if offset_minutes >= 0 else "-"
    off = z if z else f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    return time.strftime(f"%Y-%m-%d{t_sep}%H:%M:%S", local) + frac + off


def le64(n):
    return (n & 0x7FFFFFFFFFFFFFFF).to_bytes(8, "little")


def pae(*pieces):
    """PAE (tokens.md §3, envelope.md §1)."""
    return le64(len(pieces)) + b"".join(le64(len(p)) + p for p in pieces)


class JFloat(float):
    """A JSON number written with a fraction or an exponent; keeps its literal in `text`."""
    def __new__(cls, text):
        self = float.__new__(cls, text)
        self.text = text
        return self


def _no_constant(c):
    raise ValueError(f"{c} is not JSON")


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
MAX_NUMBER_LENGTH = 64


def strict_json(b, max_depth):
    """tokens.md §1 *JSON*, before any parser sees the text: one RFC 8259 value with only
    space/tab/LF/CR around it; UTF-8 (Python's codec refuses overlong forms, encoded surrogates
    and anything above U+10FFFF) without a byte-order mark; no raw control character in a string;
    only the RFC 8259 escapes, a high-surrogate escape followed at once by a low one and no lone
    low one; member names unique after unescaping; at most `max_depth` levels (the outermost
    value is level 1); no number literal over 64 characters. Returns the text; raises ValueError."""
    t = b.decode("utf-8")
    if not RULES["byte_order_mark"]:
        t = t.removeprefix("\ufeff")
    pos = 0

    def fail(what):
        raise ValueError(f"{what} at {pos}")

    def ws():
        nonlocal pos
        while pos < len(t) and t[pos] in " \t\n\r":
            pos += 1

    def hex4():
        nonlocal pos
        h = t[pos:pos + 4]
        if len(h) != 4 or any(c not in "0123456789abcdefABCDEF" for c in h):
            fail("bad \\u escape")
        pos += 4
        return int(h, 16)

    def string():
        nonlocal pos
        pos += 1
        out = []
        while True:
            if pos >= len(t):
                fail("unterminated string")
            c = t[pos]
            pos += 1
            if c == '"':
                return "".join(out)
            if ord(c) < 0x20:
                fail("raw control character")
            if c != "\\":
                out.append(c)
                continue
            e = t[pos] if pos < len(t) else ""
            pos += 1
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
            elif e == "u":
                u = hex4()
                if 0xD800 <= u <= 0xDBFF:
                    if t[pos:pos + 2] == "\\u" and 0xDC00 <= int(t[pos + 2:pos + 6], 16) <= 0xDFFF:
                        pos += 2
                        u = 0x10000 + ((u - 0xD800) << 10) + (hex4() - 0xDC00)
                    elif RULES["surrogates"]:
                        fail("unpaired high surrogate")
                elif 0xDC00 <= u <= 0xDFFF and RULES["surrogates"]:
                    fail("lone low surrogate")
                out.append(chr(u))
            else:
                fail("bad escape")

    def value(depth):
        nonlocal pos
        c = t[pos] if pos < len(t) else ""
        if c in "{[":
            if depth + 1 > max_depth and RULES["depth"]:
                fail("too deep")
            pos += 1
            ws()
            close = "}" if c == "{" else "]"
            names = set()
            if t[pos:pos + 1] == close:
                pos += 1
                return
            while True:
                ws()
                if c == "{":
                    if t[pos:pos + 1] != '"':
                        fail("expected a name")
                    name = string()
                    if name in names and RULES["duplicate_names"]:  # equal str ⇔ equal UTF-8 bytes
                        fail("duplicate member name")
                    names.add(name)
                    ws()
                    if t[pos:pos + 1] != ":":
                        fail("expected ':'")
                    pos += 1
                    ws()
                value(depth + 1)
                ws()
                if t[pos:pos + 1] == ",":
                    pos += 1
                    continue
                if t[pos:pos + 1] != close:
                    fail(f"expected ',' or {close!r}")
                pos += 1
                return
        if c == '"':
            string()
            return
        for lit in ("true", "false", "null"):
            if t.startswith(lit, pos):
                pos += len(lit)
                return
        m = _NUMBER.match(t, pos)
        if not m:
            fail("expected a value")
        if len(m.group()) > MAX_NUMBER_LENGTH and RULES["number_length"]:
            fail("number literal over 64 characters")
        pos = m.end()

    ws()
    value(0)
    ws()
    if pos != len(t):
        fail("data after the value")
    return t


def jload(b, max_depth=64):
    """Strict JSON (strict_json) from UTF-8 bytes, then parsed: numbers with '.'/exponent →
    JFloat, others int."""
    return json.loads(strict_json(b, max_depth), parse_float=JFloat, parse_int=_int, parse_constant=_no_constant)


def _int(text):
    return JFloat(text) if text == "-0" else int(text)  # keep the sign of negative zero


def numbers(v):
    """Every number in a parsed JSON value."""
    if isinstance(v, dict):
        for x in v.values():
            yield from numbers(x)
    elif isinstance(v, list):
        for x in v:
            yield from numbers(x)
    elif type(v) in (int, JFloat):
        yield v


def overflows(n):
    """Too large for binary64: it would round to infinity (`1e400`)."""
    return math.isinf(float(n)) and RULES["binary64"]


def underflows(n):
    """Not zero, but too small for binary64: it would round to zero (`1e-400`, `2e-324`)."""
    return (type(n) is JFloat and n == 0.0 and re.search(r"[1-9]", n.text.split("e")[0].split("E")[0]) is not None
            and RULES["binary64"])


def jdump(obj):
    """Compact JSON, keys sorted, '/' not escaped, non-ASCII as UTF-8 (tokens.md §5,
    envelope.md §3.4); for objects without floats."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fmt_number(x):
    """A binary64 number as envelope.md §3.4 writes it: the shortest digits that read back;
    whole numbers up to 2^53 as integers (`-0` for negative zero); magnitudes from 1e-4 to below
    2^53 in plain decimal; everything else in exponent form with at least two exponent digits."""
    x = float(x)
    if not RULES["number_format"]:
        return repr(x)  # Python's own form: 1.0, -0.0, 1e+16 written 1e+16 but 2^53 + 2 plainly
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    if x.is_integer() and abs(x) <= 2 ** 53:
        return str(int(x))
    if 1e-4 <= abs(x) < 2 ** 53:
        return repr(x)  # Python writes plain decimal in this range, shortest digits
    sign, digits, exp = decimal.Decimal(repr(x)).normalize().as_tuple()
    d = "".join(map(str, digits))
    e = exp + len(d) - 1
    return ("-" if sign else "") + d[0] + ("." + d[1:] if len(d) > 1 else "") + f"e{'+' if e >= 0 else '-'}{abs(e):02d}"


def canonical_json(v):
    """envelope.md §3.4: compact, members sorted by UTF-8 bytes, strings as tokens.md §5 step 3,
    integers (the timestamp) as they are, other numbers by fmt_number."""
    if isinstance(v, dict):
        # Python sorts str by code point, which is the order of UTF-8 bytes; UTF-16 code units
        # order the characters above U+FFFF before U+E000…U+FFFF (the mutation below).
        order = (lambda k: k) if RULES["utf8_member_order"] else (lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical_json(v[k]) for k in sorted(v, key=order)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(map(canonical_json, v)) + "]"
    if v is True or v is False or v is None or isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return str(v) if type(v) is Int64 else fmt_number(v)


class Int64(int):
    """The one number §3.4 writes as an integer whatever its size: `timestamp`."""


_TOP, _PAYLOAD = ("timestamp", "type", "sender", "payload"), ("text", "attachments", "files", "location", "receipt", "typing")


def reencode_body(msg):
    """What the reference's decode and re-encode make of a valid body (envelope.md §3.4, §3.5):
    optional members that are null dropped; unknown members of the top level and of `payload`
    kept (a null one too), their numbers as binary64; unknown members anywhere else dropped."""
    def known(o, keys):
        if not RULES["reencode_drops_unknown"]:
            return {k: x for k, x in o.items() if x is not None}
        return {k: o[k] for k in keys if o.get(k) is not None}
    out = {k: v for k, v in msg.items() if k not in _TOP}
    out.update(timestamp=Int64(msg["timestamp"]), type=msg["type"], sender=known(msg["sender"], ("id", "name", "profile_image")))
    pl = msg["payload"]
    p = {k: v for k, v in pl.items() if k not in _PAYLOAD}
    p.update(known(pl, ("text",)))
    if pl.get("attachments") is not None:
        p["attachments"] = [known(a, ("data", "media_type", "name")) for a in pl["attachments"]]
    if pl.get("files") is not None:  # attachments.md §3: unknown members of a reference are dropped
        p["files"] = []
        for f in pl["files"]:
            ref = known(f, ("blob", "key", "digest", "media_type", "name"))
            ref.update(size=Int64(f["size"]), plain_size=Int64(f["plain_size"]))
            if f.get("preview") is not None:
                ref["preview"] = known(f["preview"], ("media_type", "data"))
            p["files"].append(ref)
    for k, keys in (("location", ("latitude", "longitude")), ("receipt", ("kind", "message_ids")), ("typing", ("active",))):
        if pl.get(k) is not None:
            p[k] = known(pl[k], keys)
    out["payload"] = p
    return canonical_json(out).encode()


def is_int(v):
    return type(v) is int


def is_num(v):
    return type(v) in (int, float, JFloat)


# ---------------------------------------------------------------- PASERK (tokens.md §2)

def paserk_public(pk):
    return "k4.public." + b64e(pk)


def paserk_secret(sk64):
    return "k4.secret." + b64e(sk64)


def paserk_pid(public_paserk):
    """k4.pid = "k4.pid." || b64(BLAKE2b-264("k4.pid." || k4.public string)) (tokens.md §2)."""
    return "k4.pid." + b64e(hashlib.blake2b(("k4.pid." + public_paserk).encode(), digest_size=33).digest())


def parse_public(s):
    if not s.startswith("k4.public."):
        raise ValueError("not a k4.public")
    pk = b64d(s[len("k4.public."):])
    if len(pk) != 32:
        raise ValueError("wrong length")
    return pk


def parse_secret(s):
    if not s.startswith("k4.secret."):
        raise ValueError("not a k4.secret")
    sk = b64d(s[len("k4.secret."):])
    if len(sk) != 64 or bytes(nacl.signing.SigningKey(sk[:32]).verify_key) != sk[32:]:
        raise ValueError("wrong length or public half does not match the seed")
    return sk


def issuer_from_seed(seed):
    sk = nacl.signing.SigningKey(seed)
    pub = paserk_public(bytes(sk.verify_key))
    return {"secret_key": paserk_secret(seed + bytes(sk.verify_key)), "public_key": pub, "kid": paserk_pid(pub)}


# ---------------------------------------------------------------- tokens (tokens.md §4-§7)

def sign_token(secret_paserk, m, f, implicit=b""):
    """v4.public token over claims bytes m and footer bytes f, signed by pyseto (§4)."""
    return pyseto.encode(Key.from_paserk(secret_paserk), m, footer=f, implicit_assertion=implicit).decode()


def mint(secret_paserk, uid, audience, lifetime, jti, now):
    """The reference minter's output (§5 'What the reference minter writes'), with pyseto."""
    if not valid_uid(uid):
        raise FormatError("token_invalid_subject")
    if not 1 <= len(audience.encode()) <= 256:
        raise FormatError("token_wrong_audience")
    if lifetime <= 0:
        raise FormatError("token_invalid_claim", "exp")
    if lifetime > 3600:
        raise FormatError("token_lifetime_too_long")
    if jti is not None and not 1 <= len(jti.encode()) <= 256:
        raise FormatError("token_invalid_claim", "jti")
    iat = int(now)
    claims = {"sub": uid, "aud": audience, "iat": fmt_time(iat), "exp": fmt_time(iat + lifetime)}
    if jti is not None:
        claims["jti"] = jti
    public = paserk_public(parse_secret(secret_paserk)[32:])
    return sign_token(secret_paserk, jdump(claims), jdump({"kid": paserk_pid(public)}))


SIG_NOTES = []  # where pyseto could not express a check and PyNaCl was used instead


def verify_signature(public_paserk, token, m, sig, f):
    """Step 10 with pyseto; cross-checked against PAE + libsodium (PyNaCl). pyseto refuses a
    payload of exactly 64 bytes (empty claims) with ValueError, so that case uses PyNaCl only."""
    msg = pae(b"v4.public.", m, f, b"")
    try:
        nacl.signing.VerifyKey(parse_public(public_paserk)).verify(msg, sig)
        by_nacl = True
    except (nacl.exceptions.BadSignatureError, ValueError):
        by_nacl = False
    if not m:
        SIG_NOTES.append("empty claims: PyNaCl only")
        return by_nacl
    try:
        t = pyseto.decode(Key.from_paserk(public_paserk), token)
        by_pyseto = t.payload == m
    except pyseto.VerifyError:
        by_pyseto = False
    except Exception as e:
        raise AssertionError(f"pyseto failed unexpectedly: {e!r}")
    if by_pyseto != by_nacl:
        raise AssertionError(f"pyseto says {by_pyseto}, libsodium says {by_nacl}")
    return by_pyseto


def verify_token(token, trusted, audience, now):
    """TokenVerifier.verify, the 22 steps of tokens.md §7 in order. trusted: list of
    k4.public strings. Returns (uid, jti, kid); raises FormatError(code)."""
    if len(token.encode()) > 4096:                                          # 1
        raise FormatError("token_oversized")
    parts = token.split(".")                                                # 2
    if len(parts) not in (3, 4):
        raise FormatError("token_malformed", "parts")
    try:
        payload = b64d(parts[2])
        if len(parts) == 4:
            if parts[3] == "":
                raise ValueError("empty footer part")
            footer = b64d(parts[3])
        else:
            footer = b""
    except ValueError as e:
        raise FormatError("token_malformed", str(e))
    if parts[0] != "v4":                                                    # 3
        raise FormatError("token_unsupported_version")
    if parts[1] != "public":                                                # 4
        raise FormatError("token_wrong_purpose")
    if not footer:                                                          # 5
        raise FormatError("token_malformed", "no footer")
    if len(footer) > 512:                                                   # 6
        raise FormatError("token_malformed", "footer too long")
    try:                                                                    # 7
        fj = jload(footer, 8)
        if any(overflows(n) or underflows(n) for n in numbers(fj)):
            raise ValueError("number beyond binary64")
    except ValueError:
        fj = None
    if not isinstance(fj, dict) or not isinstance(fj.get("kid"), str):
        raise FormatError("token_malformed", "footer")
    keys = {}
    for k in trusted:                                                       # 8 (first wins)
        keys.setdefault(paserk_pid(k), k)
    if fj["kid"] not in keys:
        raise FormatError("token_unknown_key")
    if len(payload) < 64:                                                   # 9
        raise FormatError("token_malformed", "short payload")
    m, sig = payload[:-64], payload[-64:]
    if not verify_signature(keys[fj["kid"]], token, m, sig, footer):        # 10
        raise FormatError("token_bad_signature")
    try:                                                                    # 11
        c = jload(m, 8)
        if any(overflows(n) or underflows(n) for n in numbers(c)):
            raise ValueError("number beyond binary64")
    except ValueError:
        c = None
    if not isinstance(c, dict):
        raise FormatError("token_malformed", "claims")
    if not valid_uid(c.get("sub")):                                         # 12
        raise FormatError("token_invalid_subject")
    if not isinstance(c.get("aud"), str) or c["aud"] != audience or audience == "":  # 13
        raise FormatError("token_wrong_audience")
    iat, exp = parse_time(c.get("iat")), parse_time(c.get("exp"))
    if iat is None:                                                         # 14
        raise FormatError("token_invalid_claim", "iat")
    if exp is None:                                                         # 15
        raise FormatError("token_invalid_claim", "exp")
    nbf = parse_time(c["nbf"]) if "nbf" in c else None
    if "nbf" in c and nbf is None:                                          # 16
        raise FormatError("token_invalid_claim", "nbf")
    if "jti" in c and not (isinstance(c["jti"], str) and 1 <= len(c["jti"].encode()) <= 256):
        raise FormatError("token_invalid_claim", "jti")                     # 17
    if not exp > iat:                                                       # 18
        raise FormatError("token_invalid_claim", "exp")
    if not now < exp:                                                       # 19
        raise FormatError("token_expired")
    if not iat <= now + 60:                                                 # 20
        raise FormatError("token_issued_in_future")
    if nbf is not None and not nbf <= now + 60:                             # 21
        raise FormatError("token_not_yet_valid")
    if exp - iat > 3600:                                                    # 22
        raise FormatError("token_lifetime_too_long")
    return c["sub"], c.get("jti"), fj["kid"]


def token_outcome(token, trusted, audience, now):
    try:
        uid, jti, _ = verify_token(token, trusted, audience, now)
        return "ok", uid, jti
    except FormatError as e:
        return e.code, None, None


def check_token_vectors(path, label):
    """tokens.md §9: keys, mint cases byte for byte, verify cases."""
    v = json.load(open(path))
    iss, aud, now = v["issuer"], v["audience"], parse_time(v["now"])
    try:
        pk = parse_public(iss["public_key"])
        sk = parse_secret(iss["secret_key"])
        check(f"{label} issuer keys (§2: strict PASERK, secret's public half)", sk[32:] == pk, "mismatch")
    except ValueError as e:
        check(f"{label} issuer keys", False, str(e))
    if "seeds" in v:  # §9: the issuer key is the published seed's
        check(f"{label} issuer secret key from seeds.issuer",
              paserk_secret(bytes(nacl.signing.SigningKey(b64d(v["seeds"]["issuer"]))) + bytes(nacl.signing.SigningKey(b64d(v["seeds"]["issuer"])).verify_key))
              == iss["secret_key"], "differs")
    check(f"{label} issuer kid = k4.pid (own BLAKE2b-264)", paserk_pid(iss["public_key"]) == iss["kid"],
          paserk_pid(iss["public_key"]))
    check(f"{label} issuer kid = pyseto to_paserk_id",
          Key.from_paserk(iss["public_key"]).to_paserk_id() == iss["kid"], "differs")
    for i, c in enumerate(v["mint"]):
        try:
            tok = mint(iss["secret_key"], c["uid"], aud, c["lifetime_seconds"], c["jti"], parse_time(c["now"]))
        except FormatError as e:
            tok = e.code
        check(f"{label} mint[{i}] {c['uid'][:24]} byte-exact (pyseto)", tok == c["token"], f"got {tok[:80]}…")
    for c in v["verify"]:
        try:
            got, uid, jti = token_outcome(c["token"], [iss["public_key"]], aud, now)
        except AssertionError as e:
            check(f"{label} verify '{c['name']}'", False, str(e))
            continue
        if expect_outcome(f"{label} verify '{c['name']}' → {c['expect']}", got, c["expect"]) and got == "ok":
            check(f"{label} verify '{c['name']}' uid/jti", (uid, jti) == (c["uid"], c.get("jti")),
                  f"got {(uid, jti)}")


# ---------------------------------------------------------------- envelopes (envelope.md §2-§3)

LABEL_ENVELOPE = b"mailslot-envelope-v1"
MIN_CLASS, MAX_CLASS = 512, 1 << 20


def envelope_sig_input(sender, skey, recipient, rmpk, mid, body):
    """§2.4: PAE of seven pieces."""
    return pae(LABEL_ENVELOPE, sender.encode(), skey, recipient.encode(), rmpk, mid.encode(), body)


def build_record(sender, skey, recipient, mid, body, sig, version=1):
    """§2.3 record layout."""
    s, r, i = sender.encode(), recipient.encode(), mid.encode()
    return (bytes([version, len(s)]) + s + skey + bytes([len(r)]) + r + bytes([len(i)]) + i
            + len(body).to_bytes(4, "big") + body + sig)


def size_class(record_len):
    """§2.2: smallest power of two ≥ 512 and ≥ L + 49."""
    s = MIN_CLASS
    while s < record_len + 49:
        s *= 2
    if s > MAX_CLASS:
        raise FormatError("envelope_too_large")
    return s


def pad(record):
    """§2.2: ISO/IEC 7816-4 padding to S − 48."""
    s = size_class(len(record))
    return record + b"\x80" + b"\x00" * (s - 48 - len(record) - 1)


def seal_record(record, mailbox_pk, padded=None):
    """§2.1: crypto_box_seal through PyNaCl SealedBox (§2.5 step 5: a low-order key is refused)."""
    try:
        return nacl.public.SealedBox(nacl.public.PublicKey(mailbox_pk)).encrypt(pad(record) if padded is None else padded)
    except nacl.exceptions.CryptoError:
        raise FormatError("envelope_unusable_mailbox_key")


def seal_with_seed(padded, mailbox_pk, seed):
    """crypto_box_seal with the ephemeral key pair from `seed` (crypto_box_seed_keypair):
    epk || crypto_box(padded, BLAKE2b-192(epk || pk), pk, esk) (envelope.md §2.1, §6)."""
    epk, esk = nacl.bindings.crypto_box_seed_keypair(seed)
    nonce = hashlib.blake2b(epk + mailbox_pk, digest_size=24).digest()
    return epk + nacl.bindings.crypto_box_easy(padded, nonce, mailbox_pk, esk)


def seal(body, mid, sender, identity_sk, recipient, mailbox_pk):
    """§2.5 Envelope.seal (body given as bytes; validated like the opener does)."""
    msg = validate_body(body)
    if msg["sender"]["id"] != sender:
        raise FormatError("envelope_sender_mismatch")
    if not (valid_uid(sender) and valid_uid(recipient) and valid_message_id(mid)):
        raise FormatError("envelope_malformed_record")
    skey = bytes(identity_sk.verify_key)
    sig = identity_sk.sign(envelope_sig_input(sender, skey, recipient, mailbox_pk, mid, body)).signature
    return seal_record(build_record(sender, skey, recipient, mid, body, sig), mailbox_pk)


def _attachment_ok(a):
    if not isinstance(a, dict) or not isinstance(a.get("media_type"), str) or not isinstance(a.get("data"), str):
        return False
    if a.get("name") is not None and not isinstance(a["name"], str):
        return False
    try:
        b64d(a["data"])
    except ValueError:
        return False
    return True


_MEDIA_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_MEDIA_TYPE = re.compile(_MEDIA_NAME + "/" + _MEDIA_NAME)


def _media_type_ok(t):
    """attachments.md §3: type/subtype, RFC 6838 restricted names (so at most 255 bytes)."""
    return isinstance(t, str) and (_MEDIA_TYPE.fullmatch(t) is not None or not RULES["ref_media_type"]) and 0 < len(t)


def _b64_len(s, n):
    try:
        return len(b64d(s)) == n
    except ValueError:
        return False


def _reference_ok(f):
    """attachments.md §3: one file reference; members it does not know are ignored."""
    if not isinstance(f, dict):
        return False
    opt = lambda k: f.get(k) is not None  # noqa: E731
    if not all(isinstance(f.get(k), str) for k in ("blob", "key", "digest", "media_type")):
        return False
    if not (is_int(f.get("size")) and is_int(f.get("plain_size"))):
        return False
    if not valid_message_id(f["blob"]) and RULES["ref_blob_id"]:  # the message id's grammar
        return False
    try:
        key, digest = b64d(f["key"]), b64d(f["digest"])
    except ValueError:
        return False
    if (len(key) != 32 and RULES["ref_key_length"]) or (len(digest) != 32 and RULES["ref_digest_length"]):
        return False
    if not 0 <= f["plain_size"] <= 1 << 40 and RULES["ref_plain_size_range"]:
        return False
    if file_size(min(max(f["plain_size"], 0), 1 << 40)) != f["size"] and RULES["ref_size_formula"]:
        return False
    if not _media_type_ok(f["media_type"]):
        return False
    if opt("name") and not (isinstance(f["name"], str) and (1 <= len(f["name"].encode()) <= 255 or not RULES["ref_name_length"])):
        return False
    if opt("preview"):
        pv = f["preview"]
        if not (isinstance(pv, dict) and isinstance(pv.get("media_type"), str) and isinstance(pv.get("data"), str)):
            return False
        if not _media_type_ok(pv["media_type"]) and RULES["ref_preview_media_type"]:
            return False
        try:
            data = b64d(pv["data"])
        except ValueError:
            return False
        if not 1 <= len(data) <= 4096 and RULES["ref_preview_length"]:
            return False
    return True


def validate_body(body):
    """§3.1 shapes, then §3.3 validate(); returns the decoded object or raises
    envelope_invalid_body. JSON null for an optional member is treated as absent."""
    bad = FormatError("envelope_invalid_body")
    try:
        msg = jload(body, 32)                                   # §1: at most 32 deep
    except ValueError:
        raise bad
    opt = lambda o, k: o.get(k) is not None  # noqa: E731
    if not isinstance(msg, dict):
        raise bad
    ts, typ, snd, pl = msg.get("timestamp"), msg.get("type"), msg.get("sender"), msg.get("payload")
    if type(ts) is JFloat and ts.text == "-0" and RULES["timestamp_negative_zero"]:
        ts = msg["timestamp"] = 0  # §3.1: the plain form `-0` is the integer 0 (JSON keeps no sign on an integer)
    if not (is_int(ts) and (-(1 << 63) <= ts < (1 << 63) or not RULES["timestamp_int64"])) or not isinstance(typ, str):
        raise bad
    if not isinstance(snd, dict) or not isinstance(snd.get("id"), str) or not isinstance(pl, dict):
        raise bad
    for k in ("name", "profile_image"):
        if opt(snd, k) and not isinstance(snd[k], str):
            raise bad
    if opt(pl, "text") and not isinstance(pl["text"], str):
        raise bad
    if opt(pl, "attachments") and not (isinstance(pl["attachments"], list) and all(map(_attachment_ok, pl["attachments"]))):
        raise bad
    if opt(pl, "files"):  # attachments.md §3: whatever the type
        if not (isinstance(pl["files"], list) and all(map(_reference_ok, pl["files"]))):
            raise bad
        if not 1 <= len(pl["files"]) <= 32 and RULES["ref_files_count"]:
            raise bad
    if opt(pl, "location"):
        loc = pl["location"]
        if not (isinstance(loc, dict) and is_num(loc.get("latitude")) and is_num(loc.get("longitude"))):
            raise bad
    if opt(pl, "receipt"):
        r = pl["receipt"]
        if not (isinstance(r, dict) and isinstance(r.get("kind"), str) and isinstance(r.get("message_ids"), list)
                and all(isinstance(x, str) for x in r["message_ids"])):
            raise bad
    if opt(pl, "typing") and not (isinstance(pl["typing"], dict) and type(pl["typing"].get("active")) is bool):
        raise bad
    # §1 JSON numbers: the numbers the reference reads as binary64 must be finite and, unless
    # written as zero, not round to zero.
    read = [v for k, v in msg.items() if k not in _TOP] + [v for k, v in pl.items() if k not in _PAYLOAD]
    if opt(pl, "location"):
        read += [pl["location"]["latitude"], pl["location"]["longitude"]]
    if any(overflows(n) or underflows(n) for n in numbers(read)):
        raise bad
    # §3.3 validate()
    if not valid_uid(snd["id"]) or not 1 <= len(typ.encode()) <= 64:
        raise bad
    if typ == "text" and not (opt(pl, "text") and pl["text"] != ""):
        raise bad
    if typ == "picture" and not (opt(pl, "attachments") and pl["attachments"]
                                 and all(a["media_type"].startswith("image/") for a in pl["attachments"])):
        raise bad
    if typ == "file" and not opt(pl, "files") and RULES["ref_type_file"]:
        raise bad
    if typ == "location" and not (opt(pl, "location") and -90 <= pl["location"]["latitude"] <= 90
                                  and -180 <= pl["location"]["longitude"] <= 180):
        raise bad
    if typ == "receipt" and not (opt(pl, "receipt") and pl["receipt"]["message_ids"]
                                 and all(map(valid_message_id, pl["receipt"]["message_ids"]))):
        raise bad
    if typ == "typing" and not opt(pl, "typing") and RULES["typing_payload"]:
        raise bad
    try:  # spec/groups.md §4: the `group` member and the group_* types
        validate_group_body(msg, typ, pl)
    except GroupError:
        raise bad
    return msg


class RecordReader:
    """Reads a record's fields in order after its version byte; running past the end is
    envelope_malformed_record (envelope.md §2.6 check 6, ratchet.md §5.3)."""

    def __init__(self, rec):
        self.rec, self.pos = rec, 1

    def take(self, k):
        if self.pos + k > len(self.rec):
            raise FormatError("envelope_malformed_record", "overrun")
        self.pos += k
        return self.rec[self.pos - k:self.pos]

    def short(self):
        return self.take(self.take(1)[0])

    def u32(self):
        return int.from_bytes(self.take(4), "big")

    def at_end(self):
        return self.pos == len(self.rec)


def check_names(sender, rcpt, rmid, recipient, mid):
    """envelope.md §2.6 checks 8-12 (ratchet.md §5.3 the same): identifiers, then recipient and id."""
    try:
        sender, rcpt, rmid = sender.decode(), rcpt.decode(), rmid.decode()
    except UnicodeDecodeError:
        raise FormatError("envelope_malformed_record", "identifier")
    if not valid_uid(sender) or not valid_uid(rcpt) or not valid_message_id(rmid):
        raise FormatError("envelope_malformed_record", "identifier")
    if rcpt != recipient:
        raise FormatError("envelope_wrong_recipient")
    if rmid != mid:
        raise FormatError("envelope_wrong_message_id")
    return sender, rcpt, rmid


def open_envelope(envelope, mid, recipient, mailbox_sk):
    """Envelope.open, the 15 checks of §2.6 in order. Returns (sender, sender_key, body)."""
    n = len(envelope)
    if not (MIN_CLASS <= n <= MAX_CLASS and n & (n - 1) == 0):                      # 1
        raise FormatError("envelope_invalid_size")
    sk = nacl.public.PrivateKey(mailbox_sk)
    try:                                                                             # 2
        padded = nacl.public.SealedBox(sk).decrypt(envelope)
    except nacl.exceptions.CryptoError:
        raise FormatError("envelope_cannot_decrypt")
    end = len(padded.rstrip(b"\x00"))                                                # 3
    if end == 0 or padded[end - 1] != 0x80 or (size_class(end - 1) != n and RULES["smallest_class"]):
        raise FormatError("envelope_bad_padding")
    rec = padded[:end - 1]
    if len(rec) < 1:                                                                 # 4
        raise FormatError("envelope_malformed_record", "empty")
    if rec[0] != 1:                                                                  # 5
        raise FormatError("envelope_unsupported_version")
    r = RecordReader(rec)                                                            # 6
    sender, skey, rcpt, rmid = r.short(), r.take(32), r.short(), r.short()
    body = r.take(r.u32()); sig = r.take(64)                                         # noqa: E702
    if not r.at_end():                                                               # 7
        raise FormatError("envelope_malformed_record", "trailing bytes")
    sender, rcpt, rmid = check_names(sender, rcpt, rmid, recipient, mid)            # 8-12
    try:                                                                             # 13
        nacl.signing.VerifyKey(skey).verify(
            envelope_sig_input(sender, skey, rcpt, bytes(sk.public_key), rmid, body), sig)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise FormatError("envelope_bad_signature")
    msg = validate_body(body)                                                        # 14
    if msg["sender"]["id"] != sender:                                                # 15
        raise FormatError("envelope_sender_mismatch")
    return sender, skey, body


def check_envelope_vectors(path, label):
    """envelope.md §6 envelopes.json."""
    v = json.load(open(path))
    sk, pk = b64d(v["recipient_mailbox_secret_key"]), b64d(v["recipient_mailbox_public_key"])
    check(f"{label} recipient public key = X25519(secret)", bytes(nacl.public.PrivateKey(sk).public_key) == pk, "mismatch")
    for c in v["cases"]:
        name = f"{label} open '{c['name']}'"
        env = b64d(c["envelope"])
        try:
            sender, skey, body = open_envelope(env, c["id"], c["recipient"], sk)
            got = "ok"
        except FormatError as e:
            got = e.code
        if not expect_outcome(f"{name} → {c['expect']}", got, c["expect"]) or got != "ok":
            continue
        check(f"{name} sender/key/body", (sender, b64e(skey), body.decode()) ==
              (c["sender"], c["sender_identity_key"], c["body"]), f"got {(sender, b64e(skey), body[:60])}")
        rec_len = 104 + len(sender.encode()) + len(c["recipient"].encode()) + len(c["id"].encode()) + len(body)
        check(f"{name} smallest size class", len(env) == size_class(rec_len), f"{len(env)} for L={rec_len}")
        again = reencode_body(jload(body))
        if "reencoded" in c:
            check(f"{name} re-encoded as §3.4 says", again == c["reencoded"].encode(), again[:120])
        elif c.get("body_canonical", "not in canonical form" not in c["name"]):
            check(f"{name} body in §3.4 form (re-encodes to itself)", again == body, again[:120])
    for c in v["cases"]:
        if "ephemeral_seed" in c:  # §6: the box is regenerated from the published ephemeral seed
            env = b64d(c["envelope"])
            try:
                padded = nacl.public.SealedBox(nacl.public.PrivateKey(sk)).decrypt(env)
            except nacl.exceptions.CryptoError:
                continue  # sealed to another key, or altered after sealing
            check(f"{label} '{c['name']}' sealed deterministically from ephemeral_seed",
                  seal_with_seed(padded, pk, b64d(c["ephemeral_seed"])) == env, "differs")


# ---------------------------------------------------------------- key bundles (envelope.md §4)

def decode_bundle(text, expected_uid):
    """KeyBundle.decode, checks 1-6 in order; raises FormatError(bundle_*)."""
    try:
        b = jload(text.encode(), 4)
        ok = isinstance(b, dict) and is_int(b.get("version")) and all(
            isinstance(b.get(k), str) for k in ("uid", "identity_key", "mailbox_key", "created_at", "signature"))
        ik, mk, sig = (b64d(b[k]) for k in ("identity_key", "mailbox_key", "signature")) if ok else (b"", b"", b"")
        ok = ok and (len(ik), len(mk), len(sig)) == (32, 32, 64)
    except ValueError:
        ok = False
    if not ok:                                                                       # 1
        raise FormatError("bundle_malformed")
    if b["version"] not in (1, 2):                                                   # 2
        raise FormatError("bundle_malformed", "version")
    prekey = decode_bundle_v2_fields(b)                                              # 2 (ratchet.md §2)
    if not valid_uid(b["uid"]):                                                      # 3
        raise FormatError("bundle_invalid_uid")
    if expected_uid is not None and b["uid"] != expected_uid:                        # 4
        raise FormatError("bundle_wrong_user")
    if parse_time(b["created_at"]) is None and RULES["bundle_check_5"]:              # 5
        raise FormatError("bundle_malformed", "created_at")
    try:                                                                             # 5a
        nacl.bindings.crypto_scalarmult(os.urandom(32), mk)
    except nacl.exceptions.CryptoError:
        if RULES["bundle_check_5a"]:
            raise FormatError("bundle_malformed", "low-order mailbox key")
    try:                                                                             # 6
        signed = [b"mailslot-key-bundle-v1", b["uid"].encode(), ik, mk, b["created_at"].encode()]
        if prekey:
            signed = [LABEL_BUNDLE_V2] + signed[1:] + [prekey[0].to_bytes(4, "big"), prekey[1]]
        nacl.signing.VerifyKey(ik).verify(pae(*signed), sig)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise FormatError("bundle_bad_signature")
    return b


def check_bundle_vectors(path):
    v = json.load(open(path))
    if "seeds" in v:  # envelope.md §6: the valid bundle's keys are the published seeds'
        ik = b64e(bytes(nacl.signing.SigningKey(b64d(v["seeds"]["bob_identity"])).verify_key))
        mk = b64e(nacl.bindings.crypto_box_seed_keypair(b64d(v["seeds"]["bob_mailbox"]))[0])
        valid = json.loads(v["cases"][0]["bundle"])
        check("bundle keys from seeds.bob_identity and seeds.bob_mailbox", (valid["identity_key"], valid["mailbox_key"]) == (ik, mk), "differ")
    for c in v["cases"]:
        try:
            decode_bundle(c["bundle"], c["expected_uid"])
            got = "ok"
        except FormatError as e:
            got = e.code
        expect_outcome(f"bundle '{c['name']}' → {c['expect']}", got, c["expect"])


# ---------------------------------------------------------------- key ids (envelope.md §4.1)

def key_id(identity_key, mailbox_key):
    """Unpadded base64url of BLAKE2b-128 over PAE("mailslot-key-id-v1", identity_key, mailbox_key)."""
    return b64e(hashlib.blake2b(pae(b"mailslot-key-id-v1", identity_key, mailbox_key), digest_size=16).digest())


def is_key_id(text):
    """22 characters of strict unpadded base64url (16 bytes)."""
    try:
        return isinstance(text, str) and len(text) == 22 and len(b64d(text)) == 16
    except ValueError:
        return False


def check_key_id_vectors(path):
    v = json.load(open(path))
    ids = {}
    for c in v["cases"]:
        name = f"key id '{c['name']}'"
        ik = nacl.bindings.crypto_sign_seed_keypair(b64d(c["identity_seed"]))[0]
        mk = nacl.bindings.crypto_box_seed_keypair(b64d(c["mailbox_seed"]))[0]
        check(f"{name}: keys from the seeds", (b64e(ik), b64e(mk)) == (c["identity_key"], c["mailbox_key"]), "mismatch")
        check(f"{name}: PAE input", pae(b"mailslot-key-id-v1", ik, mk).hex() == c["pae_hex"], "mismatch")
        got = key_id(ik, mk)
        # libsodium's crypto_generichash with a 16-byte output is BLAKE2b with digest_size 16.
        other = b64e(nacl.bindings.crypto_generichash_blake2b_salt_personal(
            pae(b"mailslot-key-id-v1", ik, mk), digest_size=16))
        check(f"{name}: BLAKE2b-128 (hashlib and libsodium)", got == other == c["key_id"] and is_key_id(got),
              f"got {got} / {other}, expected {c['key_id']}")
        try:
            b = decode_bundle(c["bundle"], c["uid"])
            ok = (b["identity_key"], b["mailbox_key"]) == (c["identity_key"], c["mailbox_key"]) and \
                key_id(b64d(b["identity_key"]), b64d(b["mailbox_key"])) == c["key_id"]
            check(f"{name}: the bundle verifies and has this key id", ok, "other keys")
        except FormatError as e:
            check(f"{name}: the bundle verifies and has this key id", False, e.code)
        ids.setdefault(c["key_id"], set()).add((c["identity_key"], c["mailbox_key"]))
    check("key ids: one per pair of keys, distinct pairs distinct",
          len(ids) >= 4 and all(len(pairs) == 1 for pairs in ids.values()) and
          len({p for pairs in ids.values() for p in pairs}) == len(ids), repr(ids))
    for m in v["malformed"]:
        check(f"not a key id: {m['why']}", not is_key_id(m["key_id"]), repr(m["key_id"]))


# ---------------------------------------------------------------- safety numbers (envelope.md §5)

def fingerprint(uid, key):
    h = hashlib.blake2b(pae(b"mailslot-fingerprint-v1", uid.encode(), key)).digest()
    for _ in range(5200):
        h = hashlib.blake2b(h + key).digest()
    return "".join(f"{int.from_bytes(h[i:i + 5], 'big') % 100000:05d}" for i in range(0, 30, 5))


def safety_number(fa, fb):
    digits = min(fa, fb) + max(fa, fb)
    return " ".join(digits[i:i + 5] for i in range(0, 60, 5))


def display(sn):
    g = sn.split(" ")
    return "\n".join(" ".join(g[i:i + 4]) for i in range(0, 12, 4))


def check_safety_vectors(path):
    for i, c in enumerate(json.load(open(path))["cases"]):
        fa = fingerprint(c["a"]["uid"], b64d(c["a"]["identity_key"]))
        fb = fingerprint(c["b"]["uid"], b64d(c["b"]["identity_key"]))
        name = f"safety[{i}] {c['a']['uid']}/{c['b']['uid']}"
        check(f"{name} fingerprints", (fa, fb) == (c["fingerprint_a"], c["fingerprint_b"]), f"got {fa} {fb}")
        check(f"{name} safety number, both orders",
              safety_number(fa, fb) == safety_number(fb, fa) == c["safety_number"], safety_number(fa, fb))
        if i == 0:  # the three-line example of §5 is this pair
            check(f"{name} display (§5 example)", display(c["safety_number"]) ==
                  "23715 92509 46723 99080\n74682 41898 99777 81249\n11356 03913 84734 71384", display(c["safety_number"]))


# ---------------------------------------------------------------- sessions (ratchet.md)

LABEL_X3DH, LABEL_SESSION_ID = b"mailslot-x3dh-v2", b"mailslot-session-id-v2"
LABEL_ROOT, LABEL_MESSAGE_KEY, LABEL_ENVELOPE_V2 = b"mailslot-ratchet-root-v2", b"mailslot-message-key-v2", b"mailslot-envelope-v2"
LABEL_BUNDLE_V2 = b"mailslot-key-bundle-v2"
MAX_SKIP, MAX_SKIPPED_KEYS, SKIPPED_KEY_LIFETIME, MAX_RETIRED_KEYS = 1000, 2000, 31 * 86400, 16


def hmac_sha256(key, msg):
    return hmac.new(key, msg, hashlib.sha256).digest()


def hkdf(salt, ikm, info, length):
    """§1: RFC 5869 with HMAC-SHA-256; an empty salt is 32 zero bytes."""
    prk = hmac_sha256(salt or bytes(32), ikm)
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac_sha256(prk, block + info + bytes([counter]))
        out += block
        counter += 1
    return out[:length]


def x25519_from_seed(seed_bytes):
    """(secret, public) of crypto_box_seed_keypair(seed)."""
    pk, sk = nacl.bindings.crypto_box_seed_keypair(seed_bytes)
    return sk, pk


def identity_x25519(identity_pk):
    """§1: the X25519 form of an Ed25519 public key, or envelope_session_mismatch."""
    try:
        return nacl.bindings.crypto_sign_ed25519_pk_to_curve25519(identity_pk)
    except (nacl.exceptions.CryptoError, ValueError):
        raise FormatError("envelope_session_mismatch", "identity key has no X25519 form")


def dh(sk, pk):
    """§1: X25519; an all-zero output is refused (envelope_session_mismatch)."""
    try:
        out = nacl.bindings.crypto_scalarmult(sk, pk)
    except nacl.exceptions.CryptoError:
        out = bytes(32)
    if out == bytes(32):
        raise FormatError("envelope_session_mismatch", "all-zero DH")
    return out


def x3dh(outputs):
    """§3: SK from the DH outputs in order."""
    return hkdf(bytes(32), b"\xff" * 32 + b"".join(outputs), LABEL_X3DH, 32)


def session_id(ik_a, ik_b, ek_a):
    return hashlib.blake2b(pae(LABEL_SESSION_ID, ik_a, ik_b, ek_a), digest_size=16).digest()


def kdf_rk(rk, dh_out):
    out = hkdf(rk, dh_out, LABEL_ROOT, 64)
    return out[:32], out[32:]


def kdf_ck(ck):
    """§4: (next chain key, message key)."""
    return hmac_sha256(ck, b"\x02"), hmac_sha256(ck, b"\x01")


def expand_message_key(mk):
    out = hkdf(b"", mk, LABEL_MESSAGE_KEY, 56)
    return out[:32], out[32:]


class Ratchet:
    """§4: one side's Double Ratchet state; receive() works on a copy."""

    def __init__(self, rk, own, peer=None, cks=None, ckr=None):
        self.rk, self.own, self.peer, self.cks, self.ckr = rk, own, peer, cks, ckr
        self.ns = self.nr = self.pn = 0
        self.skipped = []   # [(ratchet key, number, message key, stored at)], oldest first
        self.retired = []

    @classmethod
    def initiator(cls, sk, peer_signed_prekey, own):
        rk, cks = kdf_rk(sk, dh(own[0], peer_signed_prekey))
        return cls(rk, own, peer_signed_prekey, cks=cks)

    def copy(self):
        c = Ratchet(self.rk, self.own, self.peer, self.cks, self.ckr)
        c.ns, c.nr, c.pn, c.skipped, c.retired = self.ns, self.nr, self.pn, list(self.skipped), list(self.retired)
        return c

    def next_send(self):
        self.cks, mk = kdf_ck(self.cks)
        header = (self.own[1], self.pn, self.ns)
        self.ns += 1
        return header, mk

    def _skip(self, until, now):
        if self.ckr is None or until <= self.nr:
            return
        if until - self.nr > MAX_SKIP and RULES["max_skip"]:
            raise FormatError("envelope_too_many_skipped")
        while self.nr < until:
            self.ckr, mk = kdf_ck(self.ckr)
            self.skipped.append((self.peer, self.nr, mk, now))
            self.nr += 1
        if RULES["max_skipped_keys"]:
            del self.skipped[:max(0, len(self.skipped) - MAX_SKIPPED_KEYS)]

    def receive(self, header, now, new_key):
        """§4.3, in order; returns (message key, the state to keep if the body decrypts)."""
        s = self.copy()
        key, pn, n = header
        if RULES["skipped_key_lifetime"]:
            s.skipped = [k for k in s.skipped if k[3] >= now - SKIPPED_KEY_LIFETIME]
        for i, (k, num, mk, _) in enumerate(s.skipped):
            if k == key and num == n:
                del s.skipped[i]
                return mk, s
        if key != s.peer:
            if key in s.retired and RULES["stale_retired_keys"]:
                raise FormatError("envelope_stale_message")
            if RULES["skip_to_previous_chain_length"]:
                s._skip(pn, now)
            if s.peer is not None:
                s.retired = (s.retired + [s.peer])[-MAX_RETIRED_KEYS:] if RULES["retired_key_bound"] else s.retired + [s.peer]
            s.pn, s.ns, s.nr, s.peer = s.ns, 0, 0, key
            s.rk, s.ckr = kdf_rk(s.rk, dh(s.own[0], key))
            s.own = new_key()
            s.rk, s.cks = kdf_rk(s.rk, dh(s.own[0], key))
        if n == 0xFFFFFFFF and RULES["max_message_number"]:  # step 4: the number after it would wrap
            raise FormatError("envelope_too_many_skipped")
        if n < s.nr and RULES["stale_old_number"]:
            raise FormatError("envelope_stale_message")
        s._skip(n, now)
        if s.ckr is None:                                       # step 6
            # (mutation: an implementation that takes a missing chain for a missing session)
            raise FormatError("envelope_stale_message" if RULES["missing_chain_key"] else "envelope_no_session")
        s.ckr, mk = kdf_ck(s.ckr)
        s.nr += 1
        return mk, s


class PySession:
    def __init__(self, sid, peer_identity, initiated, start, ratchet):
        self.id, self.peer_identity, self.initiated, self.start, self.ratchet = sid, peer_identity, initiated, start, ratchet


def initiate(identity_sk, peer_identity, signed_prekey, one_time_prekey, ephemeral, ratchet_key):
    """§3 initiator: prekeys are (id, public key); ephemeral and ratchet_key (secret, public)."""
    own_x = nacl.bindings.crypto_sign_ed25519_sk_to_curve25519(bytes(identity_sk) + bytes(identity_sk.verify_key))
    outputs = [dh(own_x, signed_prekey[1]), dh(ephemeral[0], identity_x25519(peer_identity)), dh(ephemeral[0], signed_prekey[1])]
    if one_time_prekey:
        outputs.append(dh(ephemeral[0], one_time_prekey[1]))
    sid = session_id(bytes(identity_sk.verify_key), peer_identity, ephemeral[1])
    start = (ephemeral[1], signed_prekey[0], one_time_prekey[0] if one_time_prekey else 0)
    return PySession(sid, peer_identity, True, start, Ratchet.initiator(x3dh(outputs), signed_prekey[1], ratchet_key))


def build_record_v2(sender, skey, recipient, mid, session, header, ciphertext=None):
    s, r, i = sender.encode(), recipient.encode(), mid.encode()
    rec = bytes([2, len(s)]) + s + skey + bytes([len(r)]) + r + bytes([len(i)]) + i + session.id
    if session.start:
        rec += b"\x01" + session.start[0] + session.start[1].to_bytes(4, "big") + session.start[2].to_bytes(4, "big")
    else:
        rec += b"\x00"
    return rec + header[0] + header[1].to_bytes(4, "big") + header[2].to_bytes(4, "big")


def seal_v2(body, mid, sender, identity_sk, recipient, mailbox_pk, session, seal_padded):
    """§5.2; advances `session` and returns the envelope. seal_padded(padded) is the outer layer."""
    if session.ratchet.cks is None or session.ratchet.ns == 0xFFFFFFFF:  # §4.3: no chain, or the counter at its end
        raise FormatError("envelope_no_session")
    ratchet = session.ratchet.copy()
    header, mk = ratchet.next_send()
    prefix = build_record_v2(sender, bytes(identity_sk.verify_key), recipient, mid, session, header)
    key, nonce = expand_message_key(mk)
    ct = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(body, pae(LABEL_ENVELOPE_V2, prefix, session.peer_identity), nonce, key)
    envelope = seal_padded(pad(prefix + len(ct).to_bytes(4, "big") + ct))
    session.ratchet = ratchet
    return envelope


def outer_open(envelope, mailbox_sk):
    """envelope.md §2.6 checks 1-4, shared by both record versions: the record."""
    n = len(envelope)
    if not (MIN_CLASS <= n <= MAX_CLASS and n & (n - 1) == 0):
        raise FormatError("envelope_invalid_size")
    try:
        padded = nacl.public.SealedBox(nacl.public.PrivateKey(mailbox_sk)).decrypt(envelope)
    except nacl.exceptions.CryptoError:
        raise FormatError("envelope_cannot_decrypt")
    end = len(padded.rstrip(b"\x00"))
    if end == 0 or padded[end - 1] != 0x80 or (size_class(end - 1) != n and RULES["smallest_class"]):
        raise FormatError("envelope_bad_padding")
    if end - 1 < 1:
        raise FormatError("envelope_malformed_record", "empty")
    return padded[:end - 1]


def read_v2(envelope, mid, recipient, mailbox_sk):
    """§5.3 checks 1-14: the clear fields of a version 2 record."""
    return parse_record_v2(outer_open(envelope, mailbox_sk), mid, recipient)


def parse_record_v2(rec, mid, recipient):
    """§5.3 checks 5-14 on the record."""
    if rec[0] != 2:
        raise FormatError("envelope_unsupported_version")
    r = RecordReader(rec)
    sender, skey, rcpt, rmid = r.short(), r.take(32), r.short(), r.short()
    sid = r.take(16)
    kind = r.take(1)[0]
    if kind > 1:
        raise FormatError("envelope_malformed_record", "kind")
    start = None
    if kind == 1:
        start = (r.take(32), r.u32(), r.u32())
        if start[1] == 0 and RULES["signed_prekey_id_nonzero"]:
            raise FormatError("envelope_malformed_record", "signed prekey id 0")
    header = (r.take(32), r.u32(), r.u32())
    prefix = rec[:r.pos]
    length = r.u32()
    if length < 16 and RULES["ciphertext_min_length"]:
        raise FormatError("envelope_malformed_record", "short ciphertext")
    ct = r.take(length)
    if not r.at_end():
        raise FormatError("envelope_malformed_record", "trailing bytes")
    sender, rcpt, rmid = check_names(sender, rcpt, rmid, recipient, mid)
    return dict(sender=sender, skey=skey, sid=sid, start=start, header=header, prefix=prefix, ct=ct)


class PyUser:
    """One user's keys, prekeys and sessions (§6), opening as §5.3 says."""

    def __init__(self, uid, identity_seed, mailbox_seed, signed_prekeys=None, one_time_prekeys=None):
        self.uid = uid
        self.identity = nacl.signing.SigningKey(identity_seed)
        self.mailbox = x25519_from_seed(mailbox_seed)
        self.signed_prekeys = dict(signed_prekeys or {})
        self.one_time_prekeys = dict(one_time_prekeys or {})
        self.sessions = {}

    def copy(self):
        u = PyUser.__new__(PyUser)
        u.uid, u.identity, u.mailbox = self.uid, self.identity, self.mailbox
        u.signed_prekeys, u.one_time_prekeys = dict(self.signed_prekeys), dict(self.one_time_prekeys)
        u.sessions = {k: PySession(s.id, s.peer_identity, s.initiated, s.start, s.ratchet.copy()) for k, s in self.sessions.items()}
        return u

    def open(self, envelope, mid, now, new_key, recipient=None, own_identity=None):
        r = read_v2(envelope, mid, recipient or self.uid, self.mailbox[0])
        used = None
        session = self.sessions.get(r["sid"])
        if session is None:                                                          # 15
            if r["start"] is None:
                raise FormatError("envelope_no_session")
            ek, spk_id, opk_id = r["start"]
            own_pk = bytes(self.identity.verify_key)
            if not RULES["prekeys_before_session_id"] and session_id(r["skey"], own_pk, ek) != r["sid"]:
                raise FormatError("envelope_malformed_record", "session id (checked too early)")
            if spk_id not in self.signed_prekeys:                                    # 16
                raise FormatError("envelope_unknown_prekey")
            opk = None
            if opk_id:
                opk = self.one_time_prekeys.get(opk_id)
                if opk is None and RULES["unknown_one_time_prekey"]:
                    raise FormatError("envelope_unknown_prekey")
                used = opk_id
            own_pk = bytes(self.identity.verify_key)
            if session_id(r["skey"], own_pk, ek) != r["sid"] and RULES["session_id"]:  # 17
                raise FormatError("envelope_malformed_record", "session id")
            spk = self.signed_prekeys[spk_id]
            own_x = nacl.bindings.crypto_sign_ed25519_sk_to_curve25519(bytes(self.identity) + own_pk)
            outputs = [dh(spk[0], identity_x25519(r["skey"])), dh(own_x, ek), dh(spk[0], ek)]   # 18
            if opk:
                outputs.append(dh(opk[0], ek))
            session = PySession(r["sid"], r["skey"], False, None, Ratchet(x3dh(outputs), spk))
        if session.id != r["sid"] or session.peer_identity != r["skey"]:              # 19
            raise FormatError("envelope_session_mismatch")
        mk, ratchet = session.ratchet.receive(r["header"], now, new_key)              # 20
        key, nonce = expand_message_key(mk)
        ad = pae(LABEL_ENVELOPE_V2, r["prefix"], own_identity or bytes(self.identity.verify_key))
        try:                                                                         # 21
            body = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(r["ct"], ad, nonce, key)
        except (nacl.exceptions.CryptoError, ValueError):  # PyNaCl: ValueError for fewer than 16 bytes
            raise FormatError("envelope_session_mismatch")
        msg = validate_body(body)                                                    # 22
        if msg["sender"]["id"] != r["sender"]:                                       # 23
            raise FormatError("envelope_sender_mismatch")
        self.sessions[session.id] = PySession(session.id, session.peer_identity, session.initiated, None, ratchet)
        if used is not None:
            self.one_time_prekeys.pop(used, None)
        return r["sender"], r["skey"], body


def decode_bundle_v2_fields(b):
    """§2: the version 2 members; returns (id, key) or None for a version 1 bundle."""
    has_id, has_key = "signed_prekey_id" in b, "signed_prekey" in b
    if b["version"] == 1 and not has_id and not has_key:
        return None
    if not (has_id and has_key) and (RULES["bundle_v2_members"] or b["version"] == 2):
        raise FormatError("bundle_malformed", "signed_prekey and signed_prekey_id go together")
    if b["version"] != 2 and RULES["bundle_v2_members"]:
        raise FormatError("bundle_malformed", "version")
    spk_id = b.get("signed_prekey_id")
    try:
        spk = b64d(b.get("signed_prekey"))
    except ValueError:
        raise FormatError("bundle_malformed", "signed_prekey")
    if not is_int(spk_id) or not 0 <= spk_id <= 0xFFFFFFFF or len(spk) != 32:
        raise FormatError("bundle_malformed", "signed prekey")
    if spk_id == 0 and RULES["bundle_v2_prekey_id"]:
        raise FormatError("bundle_malformed", "signed_prekey_id 0")
    try:
        nacl.bindings.crypto_scalarmult(os.urandom(32), spk)
    except nacl.exceptions.CryptoError:
        if RULES["bundle_v2_prekey_low_order"]:
            raise FormatError("bundle_malformed", "low-order signed prekey")
    return spk_id, spk


def check_session_vectors(path, label="sessions"):
    """ratchet.md §9 sessions.json (the reference's), or the independent file of the same layout
    (which has only users, x3dh, conversation and cases)."""
    v = json.load(open(path))
    seeds = {k: b64d(s) for k, s in v["seeds"].items()}
    if "hkdf" in v:
        check_session_primitives(v, seeds)
    users = {u["uid"]: u for u in v["users"]}
    alice_sk = nacl.signing.SigningKey(seeds[users["alice"]["identity_seed"]])
    bob_info = users["bob"]
    bob_pk = bytes(nacl.signing.SigningKey(seeds[bob_info["identity_seed"]]).verify_key)
    spk = (bob_info["signed_prekey"]["id"], x25519_from_seed(seeds[bob_info["signed_prekey"]["seed"]]))
    opks = {p["id"]: x25519_from_seed(seeds[p["seed"]]) for p in bob_info["one_time_prekeys"]}
    started, secrets = {}, {}
    for c in v["x3dh"]:
        name = f"{label} x3dh '{c['name']}'"
        ek = x25519_from_seed(seeds[c["ephemeral_seed"]])
        ik_a_x = nacl.bindings.crypto_sign_ed25519_sk_to_curve25519(bytes(alice_sk) + bytes(alice_sk.verify_key))
        outs = [dh(ik_a_x, spk[1][1]), dh(ek[0], identity_x25519(bob_pk)), dh(ek[0], spk[1][1])]
        opk = (c["one_time_prekey_id"], opks[c["one_time_prekey_id"]]) if "one_time_prekey_id" in c else None
        if opk:
            outs.append(dh(ek[0], opk[1][1]))
        want = [c["dh1_hex"], c["dh2_hex"], c["dh3_hex"]] + ([c["dh4_hex"]] if opk else [])
        check(f"{name} DH outputs", [o.hex() for o in outs] == want, [o.hex() for o in outs])
        check(f"{name} SK", x3dh(outs).hex() == c["sk_hex"], x3dh(outs).hex())
        sid = session_id(bytes(alice_sk.verify_key), bob_pk, ek[1])
        check(f"{name} session id", sid.hex() == c["session_id_hex"] and
              pae(LABEL_SESSION_ID, bytes(alice_sk.verify_key), bob_pk, ek[1]).hex() == c["session_id_input_hex"], sid.hex())
        started[c["session"]] = initiate(alice_sk, bob_pk, (spk[0], spk[1][1]), (opk[0], opk[1][1]) if opk else None, ek,
                                         x25519_from_seed(seeds[c["ratchet_seed"]]))
        secrets[c["session"]] = x3dh(outs)
    if "ratchet" in v:
        check_ratchet_parts(v, seeds, secrets["S1"], spk, bob_pk, bob_info)

    # The conversation: each side with its own state; every envelope sealed again byte for byte.
    now = v["now"]
    alice = PyUser("alice", seeds[users["alice"]["identity_seed"]], seeds[users["alice"]["mailbox_seed"]])
    bob = PyUser("bob", seeds[bob_info["identity_seed"]], seeds[bob_info["mailbox_seed"]], {spk[0]: spk[1]}, opks)
    people = {"alice": alice, "bob": bob}
    states, alice_states, sealed = [bob.copy()], [alice.copy()], {}
    for e in v["conversation"]:
        name = f"{label} conversation step {e['step']} ({e['event']} {e['message']})"
        try:
            if e["event"] == "seal":
                sender, recipient = people[e["from"]], people[e["to"]]
                sid = started[e["session"]].id
                if e["from"] == "alice" and sid not in alice.sessions:
                    alice.sessions[sid] = started[e["session"]]
                session = sender.sessions[sid]
                env = seal_v2(e["body"].encode(), e["id"], sender.uid, sender.identity, recipient.uid, recipient.mailbox[1], session,
                              lambda p, s=b64d(e["ephemeral_seed"]), pk=recipient.mailbox[1]: seal_with_seed(p, pk, s))
                check(f"{name}: sealed byte for byte", b64e(env) == e["envelope"], "differs")
                r = read_v2(env, e["id"], recipient.uid, recipient.mailbox[0])
                check(f"{name}: header and kind as listed", (r["start"] is not None, b64e(r["header"][0]), r["header"][1], r["header"][2]) ==
                      (e["start"], e["ratchet_key"], e["previous_chain_length"], e["message_number"]), repr(r["header"]))
                sealed[e["message"]] = e
            else:
                m = sealed[e["message"]]
                turned = []
                new_key = lambda: (turned.append(1), x25519_from_seed(seeds[e.get("new_ratchet_seed", "case_ratchet")]))[1]  # noqa: E731
                _, _, body = people[e["by"]].open(b64d(m["envelope"]), m["id"], now, new_key)
                check(f"{name}: opens", body == m["body"].encode() and bool(turned) == ("new_ratchet_seed" in e), body[:60])
        except FormatError as err:
            check(name, False, err.code)
        states.append(bob.copy())
        alice_states.append(alice.copy())
    for c in v["cases"]:
        user = (alice_states if c.get("opener", "bob") == "alice" else states)[c["after_step"]].copy()
        try:
            for earlier in c.get("prior", []):  # opened first, each must open; a DH step takes its seed
                user.open(b64d(earlier["envelope"]), earlier["id"], c["now"],
                          lambda s=earlier.get("new_ratchet_seed", "case_ratchet"): x25519_from_seed(seeds[s]))
            _, _, body = user.open(b64d(c["envelope"]), c["id"], c["now"], lambda: x25519_from_seed(seeds["case_ratchet"]),
                                   c["recipient"], b64d(c["opener_identity"]) if "opener_identity" in c else None)
            got = "ok" if body == c.get("body", "").encode() else "ok, another body"
        except FormatError as err:
            got = err.code
        expect_outcome(f"{label} case '{c['name']}' → {c['expect']}", got, c["expect"])


def check_session_primitives(v, seeds):
    """sessions.json: HKDF, the X25519 forms, prekeys, the version 2 bundle and its cases."""
    for c in v["hkdf"]:
        got = hkdf(bytes.fromhex(c["salt_hex"]), bytes.fromhex(c["ikm_hex"]), bytes.fromhex(c["info_hex"]), c["length"])
        check(f"sessions hkdf '{c['name']}'", got.hex() == c["okm_hex"], got.hex())
    for c in v["identities"]:
        sk = nacl.signing.SigningKey(seeds[c["seed"]])
        pk = bytes(sk.verify_key)
        x_sk = nacl.bindings.crypto_sign_ed25519_sk_to_curve25519(bytes(sk) + pk)
        x_pk = nacl.bindings.crypto_sign_ed25519_pk_to_curve25519(pk)
        check(f"sessions identity '{c['name']}' X25519 form", (b64e(pk), b64e(x_sk), b64e(x_pk)) ==
              (c["identity_key"], c["x25519_secret_key"], c["x25519_public_key"])
              and nacl.bindings.crypto_scalarmult_base(x_sk) == x_pk, "differs")
    for name, c in v["prekeys"].items():
        sk, pk = x25519_from_seed(seeds[c["seed"]])
        check(f"sessions prekey {name}", (b64e(sk), b64e(pk)) == (c["secret_key"], c["public_key"]), "differs")
    b = v["bundle"]
    fields = json.loads(b["json"])
    signed = pae(LABEL_BUNDLE_V2, fields["uid"].encode(), b64d(fields["identity_key"]), b64d(fields["mailbox_key"]),
                 fields["created_at"].encode(), fields["signed_prekey_id"].to_bytes(4, "big"), b64d(fields["signed_prekey"]))
    check("sessions bundle: signed bytes", signed.hex() == b["signed_hex"], signed.hex())
    check("sessions bundle: key id unchanged by the signed prekey", key_id(b64d(fields["identity_key"]), b64d(fields["mailbox_key"]))
          == b["key_id"] == b["key_id_version_1"], "differs")
    for c in v["bundles"]:
        try:
            decode_bundle(c["bundle"], c["expected_uid"])
            got = "ok"
        except FormatError as e:
            got = e.code
        expect_outcome(f"sessions bundle '{c['name']}' → {c['expect']}", got, c["expect"])


def check_session_examples(v):
    """The worked examples of ratchet.md §3 and §4.1 are the vectors' S1 and alice_initial."""
    text = open(os.path.join(ROOT, "spec", "ratchet.md"), encoding="utf-8").read()
    x, ai = v["x3dh"][0], v["ratchet"]["alice_initial"]
    found = dict(re.findall(r"^(DH[1-4]|SK|ratchet_id) += ([0-9a-f]+)$", text, re.M))
    check("ratchet.md §3 worked example is S1 of sessions.json",
          found == {"DH1": x["dh1_hex"], "DH2": x["dh2_hex"], "DH3": x["dh3_hex"], "DH4": x["dh4_hex"], "SK": x["sk_hex"],
                    "ratchet_id": x["session_id_hex"]}, repr(found))
    fm = ai["first_message"]
    chain = re.findall(r"\b(?:RK|CKs|mk|key|nonce) += ([0-9a-f]{48,})$", text, re.M)
    check("ratchet.md §4.1 worked example is alice_initial of sessions.json",
          chain == [ai["root_key_hex"], ai["sending_chain_key_hex"], fm["message_key_hex"], fm["next_chain_key_hex"],
                    fm["aead_key_hex"], fm["nonce_hex"]] and ai["dh_hex"] in text, repr(chain))


def check_ratchet_parts(v, seeds, s1_sk, spk, bob_pk, bob_info):
    """sessions.json `ratchet`: the initial state, both DH steps, KDF_CK, the first record."""
    check_session_examples(v)
    r = v["ratchet"]
    ai = r["alice_initial"]
    rk, ck = kdf_rk(s1_sk, dh(x25519_from_seed(seeds["alice_ratchet_1"])[0], spk[1][1]))
    check("sessions ratchet: alice's initial root and sending chain", (rk.hex(), ck.hex()) == (ai["root_key_hex"], ai["sending_chain_key_hex"]), "")
    for label, step in (("bob_step", r["bob_step"]), ("alice_step", r["alice_step"])):
        fm = step["first_message"]
        nxt, mk = kdf_ck(bytes.fromhex(fm["chain_key_hex"]))
        key, nonce = expand_message_key(mk)
        check(f"sessions ratchet {label}: KDF_CK and the message key's expansion",
              (nxt.hex(), mk.hex(), key.hex(), nonce.hex()) == (fm["next_chain_key_hex"], fm["message_key_hex"], fm["aead_key_hex"], fm["nonce_hex"]), "")
    check("sessions ratchet: alice's first message key", ai["first_message"]["chain_key_hex"] == ck.hex(), "")
    # Bob's step on A1 (his signed prekey against alice_ratchet_1, then his new key), then alice's
    # on B1 (alice_ratchet_1 against bob's new key, then alice_ratchet_2).
    steps = [("bob", r["bob_step"], s1_sk, spk[1][0], "alice_ratchet_1"),
             ("alice", r["alice_step"], None, x25519_from_seed(seeds["alice_ratchet_1"])[0], r["bob_step"]["new_ratchet_seed"])]
    for who, st, root, own_old, peer_seed in steps:
        root = root if root is not None else bytes.fromhex(ai["root_key_hex"])
        peer = x25519_from_seed(seeds[peer_seed])[1]
        rk1, ckr = kdf_rk(root, dh(own_old, peer))
        rk2, cks = kdf_rk(rk1, dh(x25519_from_seed(seeds[st["new_ratchet_seed"]])[0], peer))
        check(f"sessions ratchet: {who}'s DH step", (rk1.hex(), ckr.hex(), rk2.hex(), cks.hex(), st["first_message"]["chain_key_hex"]) ==
              (st["receiving_root_key_hex"], st["receiving_chain_key_hex"], st["root_key_hex"], st["sending_chain_key_hex"], cks.hex()), "")
    fr = r["first_record"]
    rec = bytes.fromhex(fr["record_hex"])
    a1 = next(e for e in v["conversation"] if e["message"] == fr["message"])
    parsed = parse_record_v2(rec, a1["id"], a1["to"])
    bob_mailbox_sk = x25519_from_seed(seeds[bob_info["mailbox_seed"]])[0]
    check("sessions first record: the record of A1 and its associated data",
          outer_open(b64d(a1["envelope"]), bob_mailbox_sk) == rec
          and pae(LABEL_ENVELOPE_V2, parsed["prefix"], bob_pk).hex() == fr["associated_data_hex"], "differs")


# ---------------------------------------------------------------- independent vectors

def seed(label):
    return hashlib.sha256(b"mailslot interop: " + label.encode()).digest()


def token_cases(iss, other, aud, now):
    """Verification cases relative to `now` (int). `live: False` marks cases whose outcome
    depends on the exact second (skipped when run against the binary's real clock)."""
    T = lambda d: fmt_time(now + d)  # noqa: E731
    kidf = jdump({"kid": iss["kid"]})
    DROP = object()

    def claims(**kw):
        c = {"aud": aud, "exp": T(300), "iat": T(0), "sub": "alice"}
        for k, val in kw.items():
            c.pop(k) if val is DROP else c.__setitem__(k, val)
        return jdump(c)
    S = lambda m, f=kidf, key=iss, ia=b"": sign_token(key["secret_key"], m, f, ia)  # noqa: E731
    good = S(claims(jti="interop-1"))
    pay, foot = good.split(".")[2], good.split(".")[3]
    footer_of = lambda n: jdump({"kid": iss["kid"], "x": "y" * (n - 68)})  # noqa: E731  exactly n bytes
    assert len(footer_of(512)) == 512
    last = _B64VAL[foot[-1]] | 1 if len(foot) % 4 else None
    cases = []

    def add(name, token, expect, uid=None, jti=None, live=True):
        c = {"name": name, "token": token, "expect": expect}
        if expect == "ok":
            c["uid"] = uid
            if jti is not None:
                c["jti"] = jti
        if not live:
            c["live"] = False
        cases.append(c)
    add("valid", good, "ok", "alice", "interop-1")
    add("valid, no jti", S(claims()), "ok", "alice")
    add("valid, iat exactly 60 s ahead", S(claims(iat=T(60), exp=T(360))), "ok", "alice", live=False)
    add("valid, nbf exactly 60 s ahead", S(claims(nbf=T(60))), "ok", "alice", live=False)
    add("valid, lifetime exactly 3600 s", S(claims(iat=T(-10), exp=T(3590))), "ok", "alice")
    add("valid, lowercase t and z, fractions", S(claims(iat=fmt_time(now - 1, t_sep="t", z="z", frac=".25"),
                                                        exp=fmt_time(now + 99, z="Z", frac=".000001"))), "ok", "alice")
    add("valid, negative and positive offsets", S(claims(iat=fmt_time(now, -330), exp=fmt_time(now + 300, 840))), "ok", "alice")
    add("valid, timestamp of exactly 64 bytes", S(claims(exp=fmt_time(now + 300, frac="." + "0" * 38))), "ok", "alice")
    add("valid, unknown claims and footer members ignored",
        S(claims(iss="backend", nbf=T(-5), extra={"a": [1, None]}), jdump({"kid": iss["kid"], "wpk": "x"})), "ok", "alice")
    add("valid, footer with whitespace (signed as is)", S(claims(), ('{ "kid" : "%s" }' % iss["kid"]).encode()), "ok", "alice")
    add("valid, claims unsorted with whitespace", S(('{ "sub": "alice", "iat": "%s", "exp": "%s", "aud": "%s" }'
                                                     % (T(0), T(300), aud)).encode()), "ok", "alice")
    add("valid, jti of 256 bytes (UTF-8)", S(claims(jti="é" * 128)), "ok", "alice", "é" * 128)
    u128 = "A-z_0.9" * 18 + "xy"
    add("valid, uid of 128 bytes", S(claims(sub=u128)), "ok", u128)
    add("valid, footer of exactly 512 bytes", S(claims(), footer_of(512)), "ok", "alice")
    # sizes and shape
    for size, want in ((4096, "ok"), (4097, "token_oversized")):
        t = next(t for n in range(2700, 3100) for x in range(68, 72)
                 for t in [S(claims(pad="p" * n), footer_of(x))] if len(t) == size)
        add(f"signed token of exactly {size} bytes", t, want, "alice")
    add("oversized, 4097 bytes of garbage", "v" * 4097, "token_oversized")
    add("oversized, signed", S(claims(pad="p" * 3100)), "token_oversized")
    add("three parts only", S(claims(), b""), "token_malformed")
    add("five parts", good + ".e30", "token_malformed")
    add("empty footer part (trailing dot)", f"v4.public.{pay}.", "token_malformed")
    add("padding in payload", f"v4.public.{pay}==.{foot}" if len(pay) % 4 == 2 else f"v4.public.{pay}=.{foot}", "token_malformed")
    add("non-canonical trailing bits in footer", f"v4.public.{pay}.{foot[:-1]}{'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'[last]}",
        "token_malformed")
    add("standard base64 alphabet (+/)", f"v4.public.{pay}.{foot}".replace("-", "+").replace("_", "/")
        if ("-" in pay + foot or "_" in pay + foot) else f"v4.public.{pay}+.{foot}", "token_malformed")
    add("payload length 1 mod 4", f"v4.public.{pay[:len(pay) - (len(pay) % 4) + 1]}.{foot}", "token_malformed")
    add("bad base64 beats bad version (step 2 before 3)", f"v3.public.{pay}=.{foot}", "token_malformed")
    add("v3 token", f"v3.public.{pay}.{foot}", "token_unsupported_version")
    add("uppercase V4", f"V4.public.{pay}.{foot}", "token_unsupported_version")
    add("v3.local (version before purpose)", f"v3.local.{pay}.{foot}", "token_unsupported_version")
    add("v4.local", f"v4.local.{pay}.{foot}", "token_wrong_purpose")
    add("v4.Public", f"v4.Public.{pay}.{foot}", "token_wrong_purpose")
    add("v4.local without footer (purpose before footer)", f"v4.local.{pay}", "token_wrong_purpose")
    add("footer of 513 bytes", S(claims(), footer_of(513)), "token_malformed")
    add("footer not JSON", S(claims(), b"kid"), "token_malformed")
    add("footer a JSON array", S(claims(), jdump([iss["kid"]])), "token_malformed")
    add("footer kid null", S(claims(), b'{"kid":null}'), "token_malformed")
    add("footer with a trailing comma (not RFC 8259)", S(claims(), kidf[:-1] + b",}"), "token_malformed")
    add("footer kid not a string", S(claims(), b'{"kid":42}'), "token_malformed")
    add("unknown kid", S(claims(), jdump({"kid": other["kid"]})), "token_unknown_key")
    add("kid is the issuer's k4.sid-shaped id", S(claims(), jdump({"kid": "k4.sid." + iss["kid"][7:]})), "token_unknown_key")
    add("kid is the k4.public itself", S(claims(), jdump({"kid": iss["public_key"]})), "token_unknown_key")
    add("unknown kid beats short payload (step 8 before 9)", f"v4.public.{b64e(b'x' * 10)}.{b64e(jdump({'kid': other['kid']}))}",
        "token_unknown_key")
    add("payload of 63 bytes", f"v4.public.{b64e(b'x' * 63)}.{foot}", "token_malformed")
    add("signed by another key under the trusted kid", S(claims(), key=other), "token_bad_signature")
    add("claims altered", f"v4.public.{b64e(b64d(pay).replace(b'alice', b'alicf'))}.{foot}", "token_bad_signature")
    spaced = b64e(('{ "kid":"%s"}' % iss["kid"]).encode())
    add("footer re-encoded with whitespace", f"v4.public.{pay}.{spaced}",
        "token_bad_signature")
    add("non-empty implicit assertion", S(claims(), ia=b"relay.example"), "token_bad_signature")
    add("payload of exactly 64 bytes, bad signature", f"v4.public.{b64e(bytes(64))}.{foot}", "token_bad_signature")
    add("bad signature beats non-JSON claims", f"v4.public.{b64e(b'nope' + bytes(64))}.{foot}", "token_bad_signature")
    add("empty claims, valid signature", S(b""), "token_malformed")
    add("claims not UTF-8", S(b'{"sub":"\xff"}'), "token_malformed")
    add("claims a JSON string", S(b'"alice"'), "token_malformed")
    add("claims with NaN", S(b'{"aud":"%s","sub":"alice","x":NaN}' % aud.encode()), "token_malformed")
    add("claims with a trailing comma (not RFC 8259)", S(claims()[:-1] + b',}'), "token_malformed")
    add("claims with a trailing comma in an array", S(claims()[:-1] + b',"x":[1,]}'), "token_malformed")
    add("sub missing", S(claims(sub=DROP)), "token_invalid_subject")
    add("sub '..'", S(claims(sub="..")), "token_invalid_subject")
    add("sub of 129 bytes", S(claims(sub="a" * 129)), "token_invalid_subject")
    add("sub not ASCII", S(claims(sub="alicé")), "token_invalid_subject")
    add("sub a number", S(claims(sub=7)), "token_invalid_subject")
    add("bad sub beats bad aud (step 12 before 13)", S(claims(sub="", aud="x")), "token_invalid_subject")
    add("aud differs in case", S(claims(aud=aud.upper())), "token_wrong_audience")
    add("aud an array", S(claims(aud=[aud])), "token_wrong_audience")
    add("aud missing", S(claims(aud=DROP)), "token_wrong_audience")
    add("iat a number", S(claims(iat=now)), "token_invalid_claim")
    add("iat missing", S(claims(iat=DROP)), "token_invalid_claim")
    add("exp missing", S(claims(exp=DROP)), "token_invalid_claim")
    add("exp on 29 February of a common year", S(claims(exp="2027-02-29T00:00:00+00:00")), "token_invalid_claim")
    add("exp with a leap second", S(claims(exp=T(300)[:17] + "60+00:00")), "token_invalid_claim")
    add("exp with a space for T", S(claims(exp=T(300).replace("T", " "))), "token_invalid_claim")
    add("exp with offset +24:00", S(claims(exp=T(300)[:19] + "+24:00")), "token_invalid_claim")
    add("exp with an empty fraction", S(claims(exp=T(300)[:19] + ".Z")), "token_invalid_claim")
    add("exp without offset", S(claims(exp=T(300)[:19])), "token_invalid_claim")
    add("exp of 65 bytes", S(claims(exp=fmt_time(now + 300, frac="." + "0" * 39))), "token_invalid_claim")
    add("exp with non-ASCII digits", S(claims(exp=T(300).replace("0", "٠", 1))), "token_invalid_claim")
    add("nbf null", S(claims(nbf=None)), "token_invalid_claim")
    add("nbf a number", S(claims(nbf=now)), "token_invalid_claim")
    add("jti empty", S(claims(jti="")), "token_invalid_claim")
    add("jti of 257 bytes", S(claims(jti="é" * 128 + "x")), "token_invalid_claim")
    add("jti null", S(claims(jti=None)), "token_invalid_claim")
    add("jti a number", S(claims(jti=1)), "token_invalid_claim")
    add("exp equal to iat", S(claims(exp=T(0))), "token_invalid_claim")
    add("exp before iat", S(claims(iat=T(0), exp=T(-1))), "token_invalid_claim")
    add("expired at exactly exp", S(claims(iat=T(-300), exp=T(0))), "token_expired")
    add("expired beats lifetime (step 19 before 22)", S(claims(iat=T(-7200), exp=T(-1))), "token_expired")
    add("iat 61 s ahead", S(claims(iat=T(61), exp=T(361))), "token_issued_in_future", live=False)
    add("iat far ahead", S(claims(iat=T(1000), exp=T(1300))), "token_issued_in_future")
    add("future iat beats lifetime (step 20 before 22)", S(claims(iat=T(1000), exp=T(5000))), "token_issued_in_future")
    add("nbf 61 s ahead", S(claims(nbf=T(61))), "token_not_yet_valid", live=False)
    add("nbf far ahead", S(claims(nbf=T(200))), "token_not_yet_valid")
    add("lifetime 3601 s", S(claims(iat=T(-10), exp=T(3591))), "token_lifetime_too_long")
    add("lifetime long, iat in the past", S(claims(iat=T(-7200), exp=T(100))), "token_lifetime_too_long")
    return cases


def write_independent_tokens(path):
    iss, other = issuer_from_seed(seed("issuer")), issuer_from_seed(seed("other issuer"))
    aud, now = "relay.example", parse_time("2028-02-29T12:00:00+00:00")
    mints = []
    for uid, life, jti in [("alice", 300, None), ("bob", 3600, "jti/1"), ("carol.c_c-3", 1, "café ☕"), ("d" * 128, 60, "x" * 256)]:
        mints.append({"uid": uid, "lifetime_seconds": life, "jti": jti, "now": fmt_time(now),
                      "token": mint(iss["secret_key"], uid, aud, life, jti, now)})
    cases = token_cases(iss, other, aud, int(now))
    for c in cases:
        c.pop("live", None)
    write_json(path, {
        "description": "Custom tokens (spec/tokens.md), produced by tools/interop/check.py from the spec alone "
                       "with PyNaCl and pyseto (not by the reference implementation). Same layout as "
                       "spec/vectors/tokens.json: verify each token with the issuer public key as the only trusted "
                       "key, the audience, and the time `now`; `expect` is \"ok\" or the error code. Mint cases: the "
                       "reference minter with these inputs should produce `token` byte for byte.",
        "issuer": iss, "audience": aud, "now": fmt_time(now), "mint": mints, "verify": cases})


def write_independent_envelopes(path):
    alice = nacl.signing.SigningKey(seed("alice identity"))
    mallory = nacl.signing.SigningKey(seed("mallory identity"))
    bob_mb = nacl.public.PrivateKey.from_seed(seed("bob mailbox"))
    carol_mb = nacl.public.PrivateKey.from_seed(seed("carol mailbox"))
    bpk, cpk, akey = bytes(bob_mb.public_key), bytes(carol_mb.public_key), bytes(alice.verify_key)
    MID, TS = "01KJ7Z0000000000000000INTR", 1835000000000
    cases = []

    def body(typ, payload, sender=None, **extra):
        return jdump(dict({"payload": payload, "sender": sender or {"id": "alice"}, "timestamp": TS, "type": typ}, **extra))

    def signed(b, sender="alice", key=alice, rcpt="bob", mid=MID, rmpk=bpk, version=1):
        sig = key.sign(envelope_sig_input(sender, bytes(key.verify_key), rcpt, rmpk, mid, b)).signature
        return build_record(sender, bytes(key.verify_key), rcpt, mid, b, sig, version)

    def add(name, env, expect, b=None, mid=MID, rcpt="bob"):
        c = {"name": name, "envelope": b64e(env), "id": mid, "recipient": rcpt, "expect": expect}
        if expect == "ok":
            c.update(sender="alice", sender_identity_key=b64e(akey), body=b.decode())
        cases.append(c)

    def ok(name, b):
        add(name, seal(b, MID, "alice", alice, "bob", bpk), "ok", b)
    png = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
    ok("text", body("text", {"text": "hello, bob"}, {"id": "alice", "name": "Alice", "profile_image": "https://example.com/a/alice.png"}))
    ok("text, non-ASCII", body("text", {"text": "héllo ☕ \U0001F44B \"q\" \\ / \n"}))
    ok("picture, two attachments and a caption", body("picture", {"text": "look", "attachments": [
        {"media_type": "image/png", "data": b64e(png), "name": "dot.png"}, {"media_type": "image/webp", "data": b64e(bytes(range(7)))}]}))
    ok("location", body("location", {"location": {"latitude": 48.8584, "longitude": 2.2945}}))
    ok("location at the limits", body("location", {"location": {"latitude": -90, "longitude": 180}}))
    ok("delivered receipt, two ids", body("receipt", {"receipt": {"kind": "delivered", "message_ids": [MID, "a" * 64]}}))
    ok("read receipt", body("receipt", {"receipt": {"kind": "read", "message_ids": ["0123456789abcdef"]}}))
    ok("receipt of a kind from a newer client", body("receipt", {"receipt": {"kind": "played", "message_ids": [MID]}}))
    ok("typing", body("typing", {"typing": {"active": False}}))
    ok("unknown type with unknown fields", body("poll", {"question": "lunch?", "options": ["noodles", "soup"], "text": "x"},
                                                x_client={"build": "b7", "flags": [True, False]}))
    ok("type of 64 bytes", body("t" * 64, {}))
    ok("timestamp int64 max", jdump({"payload": {"text": "t"}, "sender": {"id": "alice"}, "timestamp": (1 << 63) - 1, "type": "text"}))
    base = 104 + 5 + 3 + len(MID)
    fill = lambda n: body("text", {"text": "x" * (n - len(body("text", {"text": ""}))) })  # noqa: E731
    ok("largest record of the 512 class (463 bytes)", fill(463 - base))
    ok("smallest record of the 1 KiB class (464 bytes)", fill(464 - base))
    ok("optional members null (treated as absent; body not in canonical form)",
       b'{"payload":{"attachments":null,"text":"hi"},"sender":{"id":"alice","name":null},"timestamp":1,"type":"text"}')
    tb = body("text", {"text": "hello, bob"})
    rec = signed(tb)
    add("opened under another message id", seal_record(rec, bpk), "envelope_wrong_message_id", mid="01KJ7Z0000000000000000INTS")
    add("opened as another recipient", seal_record(rec, bpk), "envelope_wrong_recipient", rcpt="carol")
    add("wrong recipient beats wrong id (check 11 before 12)", seal_record(rec, bpk), "envelope_wrong_recipient",
        mid="01KJ7Z0000000000000000INTS", rcpt="carol")
    add("sealed to another mailbox key", seal_record(rec, cpk), "envelope_cannot_decrypt")
    env = bytearray(seal_record(rec, bpk)); env[100] ^= 1                                 # noqa: E702
    add("one byte flipped", bytes(env), "envelope_cannot_decrypt")
    add("truncated by one byte", seal_record(rec, bpk)[:-1], "envelope_invalid_size")
    add("256 bytes (below the smallest class)", seal_record(rec, bpk, pad(rec)[:256 - 48]), "envelope_invalid_size")
    add("1024 + 512 bytes (not a power of two)", seal_record(rec, bpk, rec + b"\x80" + bytes(1536 - 49 - len(rec))), "envelope_invalid_size")
    add("record signed for another recipient mailbox key", seal_record(signed(tb, rmpk=cpk), bpk), "envelope_bad_signature")
    add("record moved to another message id (re-written, not re-signed)",
        seal_record(build_record("alice", akey, "bob", "01KJ7Z0000000000000000INTS", tb, rec[-64:]), bpk),
        "envelope_bad_signature", mid="01KJ7Z0000000000000000INTS")
    add("record re-addressed to carol (not re-signed)", seal_record(build_record("alice", akey, "carol", MID, tb, rec[-64:]), bpk),
        "envelope_bad_signature", rcpt="carol")
    add("body altered after signing", seal_record(build_record("alice", akey, "bob", MID, tb.replace(b"bob", b"bib"), rec[-64:]), bpk),
        "envelope_bad_signature")
    add("signed by another identity key than the one carried",
        seal_record(build_record("alice", akey, "bob", MID, tb, signed(tb, key=mallory)[-64:]), bpk), "envelope_bad_signature")
    add("bad signature beats invalid body (13 before 14)",
        seal_record(build_record("alice", akey, "bob", MID, b"[]", rec[-64:]), bpk), "envelope_bad_signature")
    add("512-class record padded to 1 KiB (not the smallest class)",
        seal_record(rec, bpk, rec + b"\x80" + bytes(1024 - 49 - len(rec))), "envelope_bad_padding")
    add("no padding marker (0x01)", seal_record(rec, bpk, rec + b"\x01" + bytes(512 - 49 - len(rec))), "envelope_bad_padding")
    add("padding all zeros", seal_record(rec, bpk, bytes(512 - 48)), "envelope_bad_padding")
    add("no padding at all (record fills the box)", seal_record(rec, bpk, rec + b"\x07" * (512 - 48 - len(rec))), "envelope_bad_padding")
    add("empty record", seal_record(b"", bpk), "envelope_malformed_record")
    add("record version 3", seal_record(signed(tb, version=3), bpk), "envelope_unsupported_version")
    add("record version 0, otherwise garbage", seal_record(b"\x00\xff", bpk), "envelope_unsupported_version")
    add("trailing byte after the signature", seal_record(rec + b"\x00\x01", bpk), "envelope_malformed_record")
    add("body length overruns the record", seal_record(rec[:-64 - len(tb) - 4] + (len(tb) + 65).to_bytes(4, "big") + tb + rec[-64:], bpk),
        "envelope_malformed_record")
    add("signature cut short", seal_record(rec[:-1], bpk), "envelope_malformed_record")
    add("sender uid '..'", seal_record(signed(tb, sender=".."), bpk), "envelope_malformed_record")
    add("message id of 15 bytes", seal_record(signed(tb, mid="0123456789abcde"), bpk), "envelope_malformed_record", mid="0123456789abcde")
    add("message id with a dot", seal_record(signed(tb, mid="0123456789abcdef.x"), bpk), "envelope_malformed_record", mid="0123456789abcdef.x")
    add("recipient uid empty", seal_record(signed(tb, rcpt=""), bpk), "envelope_malformed_record", rcpt="")

    def bad_body(name, b, expect="envelope_invalid_body"):
        add(name, seal_record(signed(b), bpk), expect)
    bad_body("body is not JSON", b"hello")
    bad_body("body not UTF-8", b'{"payload":{"text":"\xff"},"sender":{"id":"alice"},"timestamp":1,"type":"text"}')
    bad_body("body a JSON array", b"[]")
    bad_body("body with NaN", b'{"payload":{"location":{"latitude":NaN,"longitude":0}},"sender":{"id":"alice"},"timestamp":1,"type":"location"}')
    bad_body("text message without text", body("text", {}))
    bad_body("text message with empty text", body("text", {"text": ""}))
    bad_body("text not a string", body("text", {"text": 5}))
    bad_body("timestamp with a fraction", b'{"payload":{"text":"t"},"sender":{"id":"alice"},"timestamp":1.5,"type":"text"}')
    bad_body("timestamp beyond int64", jdump({"payload": {"text": "t"}, "sender": {"id": "alice"}, "timestamp": 1 << 63, "type": "text"}))
    bad_body("timestamp a string", jdump({"payload": {"text": "t"}, "sender": {"id": "alice"}, "timestamp": "1", "type": "text"}))
    bad_body("timestamp missing", jdump({"payload": {"text": "t"}, "sender": {"id": "alice"}, "type": "text"}))
    bad_body("type empty", body("", {}))
    bad_body("type of 65 bytes", body("t" * 65, {}))
    bad_body("payload missing", jdump({"sender": {"id": "alice"}, "timestamp": 1, "type": "text"}))
    bad_body("sender.id missing", body("text", {"text": "t"}, {"name": "alice"}))
    bad_body("sender.id not a uid", body("text", {"text": "t"}, {"id": "alice bob"}))
    bad_body("sender.name not a string", body("text", {"text": "t"}, {"id": "alice", "name": 1}))
    bad_body("picture without attachments", body("picture", {"text": "t", "attachments": []}))
    bad_body("picture, media type Image/png", body("picture", {"attachments": [{"media_type": "Image/png", "data": "AA"}]}))
    bad_body("picture, media type text/plain", body("picture", {"attachments": [{"media_type": "text/plain", "data": "AA"}]}))
    bad_body("attachment data padded", body("picture", {"attachments": [{"media_type": "image/png", "data": "AA=="}]}))
    bad_body("attachment data non-canonical", body("picture", {"attachments": [{"media_type": "image/png", "data": "AB"}]}))
    bad_body("attachment without media_type", body("picture", {"attachments": [{"data": "AA"}]}))
    bad_body("latitude 90.5", body("location", {"location": {"latitude": 90.5, "longitude": 0}}))
    bad_body("longitude -180.001", body("location", {"location": {"latitude": 0, "longitude": -180.001}}))
    bad_body("location without longitude", body("location", {"location": {"latitude": 0}}))
    bad_body("latitude a string", body("location", {"location": {"latitude": "0", "longitude": 0}}))
    bad_body("receipt kind a number", body("receipt", {"receipt": {"kind": 1, "message_ids": [MID]}}))
    bad_body("receipt without kind", body("receipt", {"receipt": {"message_ids": [MID]}}))
    bad_body("body with a trailing comma (not RFC 8259)", body("text", {"text": "t"})[:-1] + b",}")
    bad_body("receipt without ids", body("receipt", {"receipt": {"kind": "read", "message_ids": []}}))
    bad_body("receipt id too short", body("receipt", {"receipt": {"kind": "read", "message_ids": ["short"]}}))
    bad_body("typing without active", body("typing", {"typing": {}}))
    bad_body("typing active not a boolean", body("typing", {"typing": {"active": 1}}))
    bad_body("unknown type, location a string", body("poll", {"location": "Paris"}))
    bad_body("unknown type, receipt kind a number", body("poll", {"receipt": {"kind": 2, "message_ids": []}}))
    bad_body("body sender is not the signer", body("text", {"text": "t"}, {"id": "mallory"}), "envelope_sender_mismatch")
    write_json(path, {
        "description": "Sealed envelopes v1 (spec/envelope.md), produced by tools/interop/check.py from the spec alone with "
                       "PyNaCl (libsodium SealedBox, Ed25519) — not by the reference implementation. Same layout as "
                       "spec/vectors/envelopes.json: open each envelope with the recipient's mailbox key pair, as "
                       "`recipient`, for message id `id`; `expect` is \"ok\" (then `sender`, `sender_identity_key` and "
                       "`body` are what opening yields) or the error code. Keys come from fixed seeds; sealing is "
                       "randomized, so the envelopes change on every run. The ok bodies are in the §3.4 form except the "
                       "case with null optional members.",
        "recipient_mailbox_secret_key": b64e(bytes(bob_mb)), "recipient_mailbox_public_key": b64e(bpk), "cases": cases})


def write_independent_sessions(path):
    """spec/vectors/independent/sessions.json (ratchet.md §9 layout: users, x3dh, conversation,
    cases) from this implementation, with its own seeds, ids and conversation. Deterministic: the
    outer boxes are sealed from ephemeral seeds (envelope.md §6), so writing it again changes nothing."""
    labels = ["alice identity", "alice mailbox", "bob identity", "bob mailbox", "bob signed prekey", "bob one-time prekey 7",
              "bob one-time prekey 8", "alice ephemeral 1", "alice ephemeral 2", "alice ratchet 1", "alice ratchet 2",
              "alice ratchet 3", "alice ratchet 4", "bob ratchet 1", "bob ratchet 2", "bob ratchet 3", "case ratchet"]
    names = {lab: lab.replace(" ", "_").replace("-", "_") for lab in labels}
    seeds = {names[lab]: seed(lab) for lab in labels}
    now, spk_id = 1835000000, 4000000000
    key = lambda n: x25519_from_seed(seeds[n])  # noqa: E731
    alice = PyUser("alice", seeds["alice_identity"], seeds["alice_mailbox"])
    bob = PyUser("bob", seeds["bob_identity"], seeds["bob_mailbox"], {spk_id: key("bob_signed_prekey")},
                 {7: key("bob_one_time_prekey_7"), 8: key("bob_one_time_prekey_8")})
    bob_pk = bytes(bob.identity.verify_key)
    people = {"alice": alice, "bob": bob}
    ratchet_seeds = {"alice": ["alice_ratchet_2", "alice_ratchet_3"], "bob": ["bob_ratchet_1", "bob_ratchet_2", "bob_ratchet_3"]}
    x3dh_entries, started, events, sealed, states, cases = [], {}, [], {}, [bob.copy()], []

    def start(label, eph, rseed, opk_id):
        ek, spk = key(eph), (spk_id, key("bob_signed_prekey")[1])
        opk = (opk_id, key(f"bob_one_time_prekey_{opk_id}")[1]) if opk_id else None
        ik_a_x = nacl.bindings.crypto_sign_ed25519_sk_to_curve25519(bytes(alice.identity) + bytes(alice.identity.verify_key))
        outs = [dh(ik_a_x, spk[1]), dh(ek[0], identity_x25519(bob_pk)), dh(ek[0], spk[1])] + ([dh(ek[0], opk[1])] if opk else [])
        s = initiate(alice.identity, bob_pk, spk, opk, ek, key(rseed))
        alice.sessions[s.id] = started[label] = s
        entry = {"name": f"{label}, {'with one-time prekey %d' % opk_id if opk_id else 'without a one-time prekey'}", "session": label,
                 "initiator": "alice", "responder": "bob", "ephemeral_seed": eph, "ratchet_seed": rseed,
                 "ephemeral_public_key": b64e(ek[1]), "signed_prekey_id": spk_id,
                 "ikm_hex": (b"\xff" * 32 + b"".join(outs)).hex(), "sk_hex": x3dh(outs).hex(),
                 "session_id_input_hex": pae(LABEL_SESSION_ID, bytes(alice.identity.verify_key), bob_pk, ek[1]).hex(),
                 "session_id_hex": s.id.hex()}
        entry.update({f"dh{i + 1}_hex": o.hex() for i, o in enumerate(outs)})
        if opk_id:
            entry["one_time_prekey_id"] = opk_id
        x3dh_entries.append(entry)

    def seal_event(name, frm, label, text, record_only=False):
        sender, recipient = people[frm], people["bob" if frm == "alice" else "alice"]
        session = sender.sessions[started[label].id]
        r = session.ratchet
        header, was_start = (r.own[1], r.pn, r.ns), session.start is not None
        mid = "01KJ7Z" + "0" * (20 - len(name)) + name
        b = jdump({"payload": {"text": text}, "sender": {"id": frm}, "timestamp": now * 1000, "type": "text"})
        eseed = hashlib.blake2b(b"mailslot vector: " + name.encode(), digest_size=32).digest()
        env = seal_v2(b, mid, frm, sender.identity, recipient.uid, recipient.mailbox[1], session,
                      lambda p: seal_with_seed(p, recipient.mailbox[1], eseed))
        sealed[name] = (mid, env, b)
        events.append({"event": "seal", "message": name, "from": frm, "to": recipient.uid, "session": label, "id": mid,
                       "body": b.decode(), "envelope": b64e(env), "ephemeral_seed": b64e(eseed), "start": was_start,
                       "ratchet_key": b64e(header[0]), "previous_chain_length": header[1], "message_number": header[2]})
        states.append(bob.copy())

    def open_event(name, by):
        used = []

        def new_key():
            used.append(ratchet_seeds[by].pop(0))
            return key(used[-1])
        mid, env, b = sealed[name]
        _, _, body = people[by].open(env, mid, now, new_key)
        assert body == b, name
        e = {"event": "open", "message": name, "by": by}
        if used:
            e["new_ratchet_seed"] = used[0]
        events.append(e)
        states.append(bob.copy())

    start("S1", "alice_ephemeral_1", "alice_ratchet_1", 7)
    seal_event("X1", "alice", "S1", "one")
    seal_event("X2", "alice", "S1", "two, opened first")
    open_event("X2", "bob")
    open_event("X1", "bob")
    for i in (1, 2, 3):
        seal_event(f"Y{i}", "bob", "S1", f"reply {i}")
    open_event("Y3", "alice")
    open_event("Y1", "alice")
    seal_event("X3", "alice", "S1", "three, in my second chain")
    alice_after_x3 = alice.copy()
    open_event("X3", "bob")
    seal_event("Y4", "bob", "S1", "reply 4, in my second chain")
    open_event("Y4", "alice")
    open_event("Y2", "alice")
    start("S2", "alice_ephemeral_2", "alice_ratchet_4", None)
    seal_event("Z1", "alice", "S2", "a second session, without a one-time prekey")
    open_event("Z1", "bob")
    for i, e in enumerate(events):
        e["step"] = i + 1
    step = lambda ev, m: next(e["step"] for e in events if e["event"] == ev and e["message"] == m)  # noqa: E731

    def reseal(name, m, change):
        rec = bytearray(outer_open(sealed[m][1], bob.mailbox[0]))
        change(rec)
        eseed = hashlib.blake2b(b"mailslot vector: " + name.encode(), digest_size=32).digest()
        return seal_with_seed(pad(bytes(rec)), bob.mailbox[1], eseed)

    def case(name, after, env, mid, expect, t=now, rcpt="bob", b=None):
        c = {"name": name, "after_step": after, "id": mid, "recipient": rcpt, "envelope": b64e(env), "now": t, "expect": expect}
        if b is not None:
            c["body"] = b.decode()
        cases.append(c)
    kind = 36 + 5 + 3 + 26 + 16  # alice → bob, 26-character ids
    case("X1 again after it opened", step("open", "X1"), sealed["X1"][1], sealed["X1"][0], "envelope_stale_message")
    case("X3 without the session", 0, sealed["X3"][1], sealed["X3"][0], "envelope_no_session")
    case("X1 naming one-time prekey 9", 0, reseal("X1 naming one-time prekey 9", "X1",
                                                     lambda r: r.__setitem__(slice(kind + 37, kind + 41), (9).to_bytes(4, "big"))),
         sealed["X1"][0], "envelope_unknown_prekey")
    case("X1 naming signed prekey 1", 0, reseal("X1 naming signed prekey 1", "X1",
                                                   lambda r: r.__setitem__(slice(kind + 33, kind + 37), (1).to_bytes(4, "big"))),
         sealed["X1"][0], "envelope_unknown_prekey")
    case("X1 with a session id off by one bit", 0, reseal("X1 with a session id off by one bit", "X1",
                                                             lambda r: r.__setitem__(kind - 16, r[kind - 16] ^ 0x80)),
         sealed["X1"][0], "envelope_malformed_record")
    case("X3 with its tag altered", step("seal", "Y3"), reseal("X3 with its tag altered", "X3",
                                                                lambda r: r.__setitem__(len(r) - 16, r[len(r) - 16] ^ 1)),
         sealed["X3"][0], "envelope_session_mismatch")
    case("X3 with its previous chain length altered", step("seal", "Y3"),
         reseal("X3 with its previous chain length altered", "X3", lambda r: r.__setitem__(kind + 36, r[kind + 36] ^ 1)),
         sealed["X3"][0], "envelope_session_mismatch")
    case("X3 with message kind 3", step("seal", "Y3"), reseal("X3 with message kind 3", "X3", lambda r: r.__setitem__(kind, 3)),
         sealed["X3"][0], "envelope_malformed_record")
    case("X3 opened as carol", step("seal", "Y3"), sealed["X3"][1], sealed["X3"][0], "envelope_wrong_recipient", rcpt="carol")
    case("X1 after X2, 31 days later", step("open", "X2"), sealed["X1"][1], sealed["X1"][0], "ok", t=now + 31 * 86400, b=sealed["X1"][2])
    case("X1 after X2, 31 days and a second later", step("open", "X2"), sealed["X1"][1], sealed["X1"][0], "envelope_stale_message",
         t=now + 31 * 86400 + 1)
    far = alice_after_x3.sessions[started["S1"].id]
    for _ in range(1000):
        far.ratchet.next_send()
    for n, expect in ((1000, "ok"), (1001, "envelope_too_many_skipped")):
        name = f"a message of X3's chain skipping {n} keys"
        mid, b = f"01KJ7Z{n:020d}", jdump({"payload": {"text": "far"}, "sender": {"id": "alice"}, "timestamp": now * 1000, "type": "text"})
        eseed = hashlib.blake2b(b"mailslot vector: " + name.encode(), digest_size=32).digest()
        env = seal_v2(b, mid, "alice", alice.identity, "bob", bob.mailbox[1], far, lambda p, s=eseed: seal_with_seed(p, bob.mailbox[1], s))
        case(name, step("open", "X3"), env, mid, expect, b=b if expect == "ok" else None)
    write_json(path, {
        "description": "Ratchets (spec/ratchet.md §9 layout) written by tools/interop/check.py, an independent implementation "
                       "with PyNaCl, from the spec alone: replay `conversation`, then open each case with bob's state after `after_step`.",
        "seeds": {k: b64e(v) for k, v in seeds.items()},
        "users": [{"uid": "alice", "identity_seed": "alice_identity", "mailbox_seed": "alice_mailbox"},
                  {"uid": "bob", "identity_seed": "bob_identity", "mailbox_seed": "bob_mailbox",
                   "signed_prekey": {"id": spk_id, "seed": "bob_signed_prekey"},
                   "one_time_prekeys": [{"id": 7, "seed": "bob_one_time_prekey_7"}, {"id": 8, "seed": "bob_one_time_prekey_8"}]}],
        "now": now, "x3dh": x3dh_entries, "conversation": events, "cases": cases,
    })


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True, separators=(",", " : "), ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- live cross-checks with the binary

def run(binary, *args, stdin=None):
    p = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def check_binary_mint(binary):
    """4a: keygen + token mint by the binary, verified with pyseto and checked against §5/§6."""
    with tempfile.TemporaryDirectory() as d:
        skfile = os.path.join(d, "issuer.secret")
        rc, out, err = run(binary, "keygen", "--secret-key-file", skfile)
        if not check("binary keygen", rc == 0, f"exit {rc}: {err}"):
            return
        lines = dict(l.split(": ", 1) for l in out.strip().splitlines() if ": " in l)
        pub, kid, secret = lines.get("public_key", ""), lines.get("kid", ""), open(skfile).read().strip()
        try:
            check("binary keygen: secret/public pair (§2)", parse_secret(secret)[32:] == parse_public(pub), "mismatch")
        except ValueError as e:
            check("binary keygen: strict PASERK", False, str(e))
            return
        check("binary keygen: kid = k4.pid(public)", kid == paserk_pid(pub) == Key.from_paserk(pub).to_paserk_id(), kid)
        for args, jti, ttl in [((), None, 300), (("--jti", "live-1", "--ttl", "3600"), "live-1", 3600),
                               (("--jti", "é/\"\\\t☕", "--ttl", "1"), "é/\"\\\t☕", 1)]:
            name = f"binary mint jti={jti!r} ttl={ttl}"
            before = int(time.time())
            rc, out, err = run(binary, "token", "mint", "--uid", "alice", "--audience", "relay.example",
                               "--issuer-secret-key", skfile, *args)
            after = int(time.time())
            if not check(f"{name}: exit 0", rc == 0, f"exit {rc}: {err}"):
                continue
            tok = out.strip()
            try:
                t = pyseto.decode(Key.from_paserk(pub), tok)
            except Exception as e:
                check(f"{name}: pyseto verifies", False, repr(e))
                continue
            check(f"{name}: pyseto verifies", True)
            c = json.loads(t.payload)
            check(f"{name}: footer is {{\"kid\":pid}} (§5.4, §6)", t.footer == jdump({"kid": kid}), t.footer)
            iat = parse_time(c.get("iat"))
            want = {"aud": "relay.example", "sub": "alice", "iat": fmt_time(iat or 0), "exp": fmt_time((iat or 0) + ttl)}
            if jti is not None:
                want["jti"] = jti
            check(f"{name}: claims (§5)", c == want and before <= iat <= after, f"{c}")
            check(f"{name}: claim bytes in the §5 form", t.payload == jdump(c), t.payload)
            check(f"{name}: pyseto re-mint is byte-identical",
                  mint(secret, "alice", "relay.example", ttl, jti, iat) == tok, "differs")
            got = token_outcome(tok, [pub], "relay.example", time.time())
            check(f"{name}: own verifier accepts", got[0] == "ok" and got[1:] == ("alice", jti), str(got))


def check_binary_verify(binary):
    """4b: tokens minted here (pyseto) verified by `token verify` against the real clock."""
    iss, other = issuer_from_seed(os.urandom(32)), issuer_from_seed(os.urandom(32))
    now = int(time.time())
    tok = mint(iss["secret_key"], "alice", "relay.example", 300, None, now)
    rc, out, err = run(binary, "token", "verify", tok, "--issuer-public-key", iss["public_key"], "--audience", "relay.example")
    check("binary verifies a pyseto token: exit 0, uid: alice", rc == 0 and "uid: alice" in out.splitlines(), f"exit {rc} {out!r} {err!r}")
    expired = sign_token(iss["secret_key"], jdump({"aud": "relay.example", "exp": fmt_time(now - 100), "iat": fmt_time(now - 400),
                                                    "sub": "alice"}), jdump({"kid": iss["kid"]}))
    rc, out, err = run(binary, "token", "verify", expired, "--issuer-public-key", iss["public_key"], "--audience", "relay.example")
    check("binary refuses an expired pyseto token: exit 65, token_expired", rc == 65 and "token_expired" in err, f"exit {rc} {err!r}")
    for c in token_cases(iss, other, "relay.example", now):
        if c.get("live") is False:
            continue
        rc, out, err = run(binary, "token", "verify", "-", "--issuer-public-key", iss["public_key"], "--audience", "relay.example",
                           stdin=c["token"])
        if c["expect"] == "ok":
            lines = out.splitlines()
            good = rc == 0 and f"uid: {c['uid']}" in lines and (c.get("jti") is None or f"jti: {c['jti']}" in lines)
        else:
            good = rc == 65 and re.search(r"\b%s\b" % c["expect"], err) is not None
        check(f"binary verify '{c['name']}' → {c['expect']}", good, f"exit {rc}, stdout {out.strip()!r}, stderr {err.strip()!r}")


def check_binary_refusals(binary):
    """tokens.md §2 (parsers MUST refuse bad PASERKs), §5 step 1 (minter refusals), §7 step 13
    (an empty configured audience accepts no token), against the binary's CLI."""
    iss = issuer_from_seed(seed("live refusals"))
    sk, pk = parse_secret(iss["secret_key"]), parse_public(iss["public_key"])
    A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    bits = lambda k: k[:-1] + A[A.index(k[-1]) | 1]  # noqa: E731
    with tempfile.TemporaryDirectory() as d:
        def keyfile(text):
            path = os.path.join(d, f"k{len(os.listdir(d))}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (text + "\n").encode())
            os.close(fd)
            return path
        good = keyfile(iss["secret_key"])
        for name, text in [("public half not matching the seed", paserk_secret(sk[:32] + bytes(32))),
                           ("k3.secret", "k3.secret." + iss["secret_key"][10:]), ("non-canonical bits", bits(iss["secret_key"])),
                           ("padded", iss["secret_key"] + "=="), ("63 bytes", paserk_secret(sk[:63])),
                           ("a k4.public", iss["public_key"])]:
            rc, _, err = run(binary, "token", "mint", "--uid", "alice", "--issuer-secret-key", keyfile(text))
            check(f"binary refuses issuer secret key: {name}", rc != 0, f"exit {rc}")
        for name, args in [("uid '..'", ["--uid", ".."]), ("ttl 0", ["--uid", "a", "--ttl", "0"]),
                           ("ttl 3601", ["--uid", "a", "--ttl", "3601"]), ("empty audience", ["--uid", "a", "--audience", ""]),
                           ("audience of 257 bytes", ["--uid", "a", "--audience", "x" * 257]), ("empty jti", ["--uid", "a", "--jti", ""]),
                           ("jti of 257 bytes", ["--uid", "a", "--jti", "é" * 128 + "x"])]:
            rc, out, err = run(binary, "token", "mint", "--issuer-secret-key", good, *args)
            check(f"binary minter refuses {name}", rc != 0 and out == "", f"exit {rc}")
    tok = mint(iss["secret_key"], "alice", "relay.example", 300, None, time.time())
    for name, key in [("non-canonical bits", bits(iss["public_key"])), ("k3.public", "k3.public." + iss["public_key"][10:]),
                      ("a k4.secret", iss["secret_key"]), ("31 bytes", paserk_public(pk[:31])), ("padded", iss["public_key"] + "=")]:
        rc, out, err = run(binary, "token", "verify", tok, "--issuer-public-key", key, "--audience", "relay.example")
        check(f"binary refuses issuer public key: {name}", rc != 0 and "uid:" not in out, f"exit {rc}")
    empty = sign_token(iss["secret_key"], jdump({"aud": "", "exp": fmt_time(time.time() + 300), "iat": fmt_time(time.time()),
                                                 "sub": "alice"}), jdump({"kid": iss["kid"]}))
    rc, out, err = run(binary, "token", "verify", empty, "--issuer-public-key", iss["public_key"], "--audience", "")
    check("binary with an empty audience refuses aud \"\" (§7 step 13)", rc == 65 and "token_wrong_audience" in err, f"exit {rc} {err!r}")


# ---------------------------------------------------------------- encrypted files (attachments.md §1-§2)

CHUNK, SEALED_CHUNK, HEADER = 65536, 65553, 24
TAG_MESSAGE, TAG_FINAL = 0, 3


def file_padded_size(plain):
    """§1.1: the size class of a file of `plain` bytes; None outside 0…2^40."""
    if not 0 <= plain <= 1 << 40:
        return None
    n = max(plain, 1)
    if n <= CHUNK:
        return CHUNK
    if n <= 1 << 20:
        return 1 << (n - 1).bit_length()
    step = 1 << ((n - 1).bit_length() - 1 - 4)
    return -(-n // step) * step


def file_size(plain):
    p = file_padded_size(plain)
    return None if p is None else HEADER + p + 17 * (p // CHUNK)


def file_valid_size(size):
    if size <= HEADER or (size - HEADER) % SEALED_CHUNK:
        return False
    p = (size - HEADER) // SEALED_CHUNK * CHUNK
    return file_padded_size(p) == p


def file_ad(plain):
    return b"mailslot-file-v1" + (plain % (1 << 64)).to_bytes(8, "big")


def file_plaintext(n):
    return bytes(i % 251 for i in range(n))


def seal_file(plain, key, header):
    """§1.2, from a chosen header: init_pull gives the state init_push makes for that header."""
    st = nacl.bindings.crypto_secretstream_xchacha20poly1305_state()
    nacl.bindings.crypto_secretstream_xchacha20poly1305_init_pull(st, header, key)
    padded = plain + bytes(file_padded_size(len(plain)) - len(plain))
    n = len(padded) // CHUNK
    out = [header]
    for i in range(n):
        out.append(nacl.bindings.crypto_secretstream_xchacha20poly1305_push(
            st, padded[i * CHUNK:(i + 1) * CHUNK], file_ad(len(plain)), TAG_FINAL if i == n - 1 else TAG_MESSAGE))
    return b"".join(out)


def open_file(ct, key, digest, size, plain):
    """§2: the opening steps in order; returns the file or raises FormatError(file_*)."""
    if file_size(plain) != size and RULES["file_size_formula"]:                      # 1
        raise FormatError("file_bad_length")
    if len(ct) < size and RULES["file_shorter"]:                                     # 2
        raise FormatError("file_truncated")
    if len(ct) > size and RULES["file_longer"]:
        raise FormatError("file_bad_length")
    if not hmac.compare_digest(hashlib.blake2b(ct, digest_size=32).digest(), digest) and RULES["file_digest"]:  # 3
        raise FormatError("file_digest_mismatch")
    if len(ct) < HEADER:
        raise FormatError("file_truncated")
    st = nacl.bindings.crypto_secretstream_xchacha20poly1305_state()                 # 4
    nacl.bindings.crypto_secretstream_xchacha20poly1305_init_pull(st, ct[:HEADER], key)
    n = max(size - HEADER, 0) // SEALED_CHUNK
    out, dirty = [], False
    for i in range(n):
        c = ct[HEADER + i * SEALED_CHUNK:HEADER + (i + 1) * SEALED_CHUNK]
        if len(c) < SEALED_CHUNK:
            raise FormatError("file_truncated")
        try:
            m, tag = nacl.bindings.crypto_secretstream_xchacha20poly1305_pull(st, c, file_ad(plain))
        except nacl.exceptions.CryptoError:
            raise FormatError("file_cannot_decrypt")
        last = i == n - 1
        if tag == TAG_FINAL and not last and RULES["file_early_final"]:
            raise FormatError("file_bad_tag")
        if tag not in (TAG_MESSAGE, TAG_FINAL) and RULES["file_other_tag"]:
            raise FormatError("file_bad_tag")
        if tag == TAG_MESSAGE and last and RULES["file_final_required"]:
            raise FormatError("file_truncated")
        keep = max(0, min(CHUNK, plain - i * CHUNK))
        if any(m[keep:]) and RULES["file_padding"]:                                 # 5, after every chunk
            if not RULES["file_padding_after_decrypt"]:
                raise FormatError("file_bad_padding")
            dirty = True
        out.append(m[:keep])
    if dirty:
        raise FormatError("file_bad_padding")
    return b"".join(out)


def check_file_vectors(path):
    """attachments.md §5 files.json: sizes, deterministic sealing, opening cases, references."""
    v = json.load(open(path))
    for e in v["sizes"]:
        check(f"files size class of {e['plain_size']}", (file_padded_size(e["plain_size"]), file_size(e["plain_size"])) ==
              (e["padded_size"], e["size"]), f"{file_padded_size(e['plain_size'])}, {file_size(e['plain_size'])}")
    for e in v["valid_sizes"]:
        check(f"files isValidSize({e['size']}) = {e['valid']}", file_valid_size(e["size"]) == e["valid"], "differs")
    for e in v["sealed"]:
        plain = file_plaintext(e["plain_size"])
        ct = seal_file(plain, b64d(e["key"]), b64d(e["header"]))
        check(f"files sealed {e['plain_size']}: size and digest", (len(ct), b64e(hashlib.blake2b(ct, digest_size=32).digest())) ==
              (e["size"], e["digest"]), f"{len(ct)}")
        check(f"files sealed {e['plain_size']}: opens", open_file(ct, b64d(e["key"]), b64d(e["digest"]), e["size"], e["plain_size"]) == plain, "")
    streams = v["streams"]
    for name in ("one", "two"):
        s = streams[name]
        check(f"files stream '{name}' is what §1 seals", seal_file(file_plaintext(s["plain_size"]), b64d(s["key"]), b64d(s["header"])) ==
              b64d(s["ciphertext"]), "differs")
    for c in v["cases"]:
        ct = bytearray(b64d(streams[c["stream"]]["ciphertext"]))
        if "truncate_to" in c:
            del ct[c["truncate_to"]:]
        if "append" in c:
            ct += b64d(c["append"])
        if "flip_byte" in c:
            ct[c["flip_byte"]] ^= 1
        try:
            got = open_file(bytes(ct), b64d(c["key"]), b64d(c["digest"]), c["size"], c["plain_size"])
            got = "ok" if got == file_plaintext(c["plain_size"]) else "wrong plaintext"
        except FormatError as e:
            got = e.code
        expect_outcome(f"files open '{c['name']}' → {c['expect']}", got, c["expect"])
    for c in v["references"]:
        try:
            msg = validate_body(c["body"].encode())
            got = "ok"
        except FormatError as e:
            got = e.code
        if expect_outcome(f"files reference '{c['name']}' → {c['expect']}", got, c["expect"]) and c.get("canonical"):
            again = reencode_body(msg)
            check(f"files reference '{c['name']}' re-encodes to itself", again == c["body"].encode(), again[:120])


# ---------------------------------------------------------------- main

def self_checks():
    """Spec examples that are not in the vector files."""
    check("tokens.md §2 k4.pid-1 (all-zero key)", paserk_pid("k4.public." + "A" * 43) == "k4.pid.S_XQmeEwHbbvRmiyfXfHYpLGjXGzjTRSDoT1YtTakWFE",
          paserk_pid("k4.public." + "A" * 43))
    check("tokens.md §3 PAE() = LE64(0)", pae() == bytes(8), pae().hex())
    check("strict base64url refuses '=', 1 mod 4, trailing bits", all(
        _raises(lambda s=s: b64d(s)) for s in ["AA==", "A", "AB", "AAB", "A A", "+/"]) and b64d("") == b"", "")
    bad = ["2027-01-15T08:00:60Z", "2027-02-29T00:00:00Z", "2027-01-15T24:00:00Z", "2027-01-15T08:00:00+00:60",
           "2027-01-15T08:00:00", "2027-01-15 08:00:00Z", "2027-13-01T00:00:00Z", "2027-01-15T08:00:00Z\n"]
    check("RFC 3339 refusals (tokens.md §1)", all(parse_time(s) is None for s in bad), [s for s in bad if parse_time(s) is not None])
    check("RFC 3339 leap day 2028 and offsets", parse_time("2028-02-29T01:00:00+01:00") == parse_time("2028-02-29T00:00:00Z")
          == calendar.timegm((2028, 2, 29, 0, 0, 0)), "")
    try:
        seal_record(b"\x01", bytes(32))
        got = "sealed"
    except FormatError as e:
        got = e.code
    check("envelope.md §2.5: sealing to a low-order key → envelope_unusable_mailbox_key", got == "envelope_unusable_mailbox_key", got)
    ik = nacl.signing.SigningKey(seed("bundle"))
    fields = {"uid": "bob", "identity_key": b64e(bytes(ik.verify_key)), "mailbox_key": b64e(bytes(32)),
              "created_at": "2027-01-15T08:00:00+00:00", "version": 1}
    fields["signature"] = b64e(ik.sign(pae(b"mailslot-key-bundle-v1", b"bob", bytes(ik.verify_key), bytes(32),
                                           fields["created_at"].encode())).signature)
    try:
        decode_bundle(jdump(fields).decode(), "bob")
        got = "ok"
    except FormatError as e:
        got = e.code
    check("envelope.md §4 check 5a: signed bundle with a low-order mailbox key → bundle_malformed", got == "bundle_malformed", got)


# ---------------------------------------------------------------- openapi.yaml against the vectors

def check_openapi_bundles():
    """spec/openapi.yaml's KeyBundle (JSON Schema 2020-12, as a validating client or proxy reads
    it) against every bundle of the vectors: each bundle a verifier accepts, version 1 and 2,
    matches exactly one of its schemas, and the bundles whose shape is wrong for their version
    (version 1 with a signed prekey member, version 2 without, an id out of range) match none."""
    import jsonschema, yaml
    spec = yaml.safe_load(open(os.path.join(ROOT, "spec", "openapi.yaml"), encoding="utf-8"))
    schema = {"$ref": "#/components/schemas/KeyBundle", "components": spec["components"]}
    validator = jsonschema.Draft202012Validator(schema)
    cases = json.load(open(os.path.join(VECTORS, "bundles.json")))["cases"] + json.load(open(os.path.join(VECTORS, "sessions.json")))["bundles"]
    cases += [{"name": f"key-ids.json '{c['name']}'", "bundle": c["bundle"], "expect": "ok"}
              for c in json.load(open(os.path.join(VECTORS, "key-ids.json")))["cases"]]
    versions = set()
    for c in cases:
        if c["expect"] != "ok":
            continue
        bundle = json.loads(c["bundle"])
        versions.add(bundle["version"])
        errors = [e.message for e in validator.iter_errors(bundle)]
        check(f"openapi.yaml KeyBundle matches the accepted bundle '{c['name']}'", not errors, "; ".join(errors)[:200])
    check("openapi.yaml KeyBundle: accepted bundles of both versions were checked", versions == {1, 2}, repr(versions))
    wrong_shape = {"unknown version", "short signature", "version 1 with a signed prekey", "version 2 without a signed prekey",
                   "signed_prekey_id without signed_prekey", "signed_prekey without signed_prekey_id", "signed prekey id 0, signed",
                   "signed prekey id 2^32", "signed prekey id -1", "signed prekey of 31 bytes",
                   "version 1 with signed_prekey and signed_prekey_id, signed as version 1",
                   "version 1 with signed_prekey_id only, signed as version 1", "version 1 with signed_prekey only, signed as version 1"}
    shaped = [c for c in cases if c["name"] in wrong_shape]
    check("openapi.yaml KeyBundle: the wrong shapes are among the vectors", len(shaped) == len(wrong_shape), f"{len(shaped)}")
    for c in shaped:
        check(f"openapi.yaml KeyBundle refuses '{c['name']}'", not validator.is_valid(json.loads(c["bundle"])), "matched")


def _raises(f):
    try:
        f()
        return False
    except ValueError:
        return True


def body_outcome(body):
    """"ok" or the code validate_body refuses a chat body with."""
    try:
        validate_body(body)
        return "ok"
    except FormatError as e:
        return e.code


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relay-binary", required=True)
    ap.add_argument("--write-independent", action="store_true")
    a = ap.parse_args()
    ind = os.path.join(VECTORS, "independent")
    if a.write_independent:
        write_independent_tokens(os.path.join(ind, "tokens.json"))
        write_independent_envelopes(os.path.join(ind, "envelopes.json"))
        write_independent_sessions(os.path.join(ind, "sessions.json"))
        print(f"wrote {ind}/tokens.json, envelopes.json and sessions.json")
    self_checks()
    check_token_vectors(os.path.join(VECTORS, "tokens.json"), "tokens")
    check_envelope_vectors(os.path.join(VECTORS, "envelopes.json"), "envelopes")
    check_bundle_vectors(os.path.join(VECTORS, "bundles.json"))
    check_safety_vectors(os.path.join(VECTORS, "safety-numbers.json"))
    check_key_id_vectors(os.path.join(VECTORS, "key-ids.json"))
    check_session_vectors(os.path.join(VECTORS, "sessions.json"))
    check_file_vectors(os.path.join(VECTORS, "files.json"))
    check_openapi_bundles()
    check_group_vectors(os.path.join(VECTORS, "groups.json"), check, jload, body_outcome)
    # Wake-ups (spec/push.md §7): the Web Push payloads decrypted with Mozilla's http_ece, VAPID
    # verified with py_vapid, the JWTs and webhook signatures recomputed (push_vectors.py).
    if os.path.exists(os.path.join(VECTORS, "push.json")):
        from push_vectors import check_push_vectors
        check_push_vectors(os.path.join(VECTORS, "push.json"), check)
    else:
        print("note: spec/vectors/push.json is absent: no push vectors checked")
    if os.path.exists(os.path.join(ind, "tokens.json")):
        check_token_vectors(os.path.join(ind, "tokens.json"), "independent tokens")
    if os.path.exists(os.path.join(ind, "envelopes.json")):
        check_envelope_vectors(os.path.join(ind, "envelopes.json"), "independent envelopes")
    if os.path.exists(os.path.join(ind, "sessions.json")):
        check_session_vectors(os.path.join(ind, "sessions.json"), "independent sessions")
    if not os.access(a.relay_binary, os.X_OK):
        check("relay binary present", False, a.relay_binary)
    else:
        check_binary_mint(a.relay_binary)
        check_binary_verify(a.relay_binary)
        check_binary_refusals(a.relay_binary)
    if SIG_NOTES:
        print(f"note: {len(SIG_NOTES)} signature check(s) used PyNaCl alone (pyseto refuses a 64-byte payload)")
    failed = RESULTS.count(False)
    print(f"{len(RESULTS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
