#!/usr/bin/env python3
"""Independent Mailslot relay client, written from spec/ alone (protocol.md, openapi.yaml,
tokens.md, envelope.md, ratchet.md), run against a relay it starts itself.

Python stdlib + PyNaCl (libsodium) + pyseto (PASETO) + websockets. The token, envelope, key-bundle
and session (version 2) formats come from check.py (the earlier independent implementation of
those specs).

    relay_client.py --relay-binary PATH [--cli-binary PATH]

(--cli-binary: the Swift `mailslot` CLI; by default `mailslot` beside the relay binary.)

It makes its own issuer key pair, starts `mailslot-relay serve` on a free loopback port with a
temporary data folder, and then, as clients:

  * signs in (custom tokens minted with pyseto), publishes and verifies key bundles, seals chat
    messages (text, location, receipt), sends them over HTTP PUT and the WebSocket `send` frame,
    receives them over the subscription, opens and verifies them, acks them, and checks that the
    mailbox is empty and the envelopes are gone from the database files;
  * sessions: refresh rotation, reuse, sign-out (and the sockets they end); idempotent retry
    and conflicts; leases; paging; expiry;
  * the access-rules table of protocol.md §2, black-box, for every route and every principal
    (owner, author, another signed-in user, no session, a signed-out session);
  * limits: envelope size and size classes, strict JSON, Content-Type, rate limit (the relay runs
    with a small --create-burst/--create-rate), mailbox full (--max-pending), bad frames;
  * key ids (envelope.md §4.1): creates naming the recipient's keys, 409 stale_keys after the
    recipient publishes a new mailbox key, re-sealing under the same id, identical retries,
    malformed key ids, the WebSocket `send` frame;
  * one-time prekeys (§4.14): upload, retry, conflict, the checks and the supply's limit, the
    rules, claims lowest id first and each once, `"prekey": null`, the `ready` frame's count, a
    blocked claimer, a bundle of another identity, the per-owner claim limit;
  * ratchets with the Swift CLI (ratchet.md): Python users with check.py's version 2 (a v2
    bundle, one-time prekeys, X3DH, the Double Ratchet, as §6 says a client does) and a CLI
    profile in a temporary MAILSLOT_HOME (`login`, `send`, `receive --json`) talk both ways: the
    CLI's v2 bundle and its 100 prekeys (seen through a second session of the CLI's uid), its
    session start with a Python prekey (which leaves the relay), Python's replies in that
    session, a session Python starts with a prekey it claims of the CLI's, the CLI's answer in
    it, a start naming that spent prekey (the CLI's `unreadable` receipt, the message sent again
    in a new session, which the CLI then answers in), two messages created in reverse order,
    replays under the same and another id and a version 1 envelope after version 2 ones (none
    shown; the mailbox ends empty);
  * blobs (§4.15–§4.21, attachments.md): a file sealed here uploaded in parts (a wrong digest
    refused and nothing recorded, then right), the create's and the parts' refusals, the blob
    rules black-box (a non-party's every answer byte for byte a random id's), the reference in a
    sealed `file` message, a download by Range across a part boundary and resumed, opened and
    verified, acknowledged, and then nothing left: no record, no file under the relay's blobs/;
    and files both ways with the Swift CLI: a Python-sealed file saved byte for byte by
    `receive --save-to`, and a `send --file` downloaded here by ranges, opened and acknowledged;
  * the send to many (§4.25, batch_story.py): per-entry results in entry order, the requests
    refused whole, the rate in entries, the WebSocket `send_many`;
  * a group with CLI members (spec/groups.md, group_story.py): a CLI admin's genesis, add and
    removal verified and folded here, a group message sent as one batch to the CLI members,
    and no copy on the relay for the removed Python member;
  * erasure (§6): erased ciphertext is in neither database file shortly after;
  * `serve` refusing unusable settings (§11).

Every wait is bounded; a run takes about 20 s. Only what a client can observe is checked.

Prints `PASS name` / `FAIL name: why` per check, then `N passed, M failed`; exits 0 only when
nothing failed. The relay is always stopped with SIGTERM and must exit 0.
"""
import argparse, hashlib, http.client, json, os, re, secrets, shutil, signal, socket, stat, subprocess, sys, tempfile, time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check as fmt  # noqa: E402  (check.py: tokens.md / envelope.md formats)
import push_story  # noqa: E402  (issue 29's wake-up story with the CLI)
import batch_story  # noqa: E402  (the send to many, protocol.md §4.25)
import group_story  # noqa: E402  (issue 30's group with CLI members)

import nacl.public, nacl.signing  # noqa: E402
import pyseto  # noqa: E402
from pyseto import Key  # noqa: E402
import websockets.exceptions  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

AUDIENCE = "interop.relay.test"
CREATE_BURST, CREATE_RATE, MAX_PENDING, WINDOW = 30, 0.5, 10, 4   # relay flags, so the limits are reachable
MAX_ENVELOPE = 65536                                      # the default (protocol.md §11)
DEFAULT_TTL = 604800
TIMEOUT = 5.0                                             # every single wait is bounded by this
BLOB_PART = 1 << 20                                       # --blob-part-bytes: the least, so a 2.5 MB file has 3 parts

RESULTS = []
NOTES = []          # observations that are not pass/fail (where the spec leaves a choice)


def ok(name, cond, why=""):
    RESULTS.append(bool(cond))
    print(f"PASS {name}" if cond else f"FAIL {name}: {why}", flush=True)
    return bool(cond)


# ---------------------------------------------------------------- the relay process

class Relay:
    def __init__(self, binary, tmp, issuer_public, extra=()):
        self.binary, self.tmp, self.issuer_public = binary, tmp, issuer_public
        self.extra = list(extra)                       # more `serve` flags (the wake-up story's VAPID key)
        self.data = os.path.join(tmp, "data")          # does not exist yet: the relay creates it
        self.log_path = os.path.join(tmp, "relay.log")
        self.proc = None
        self.port = None

    def start(self):
        for _ in range(3):                               # a free port can be taken in between
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data", self.data,
                 "--issuer-public-key", self.issuer_public, "--audience", AUDIENCE,
                 "--create-burst", str(CREATE_BURST), "--create-rate", str(CREATE_RATE),
                 # a send to many may not be larger than the burst (the relay refuses to start otherwise)
                 "--max-batch-entries", str(CREATE_BURST),
                 "--max-pending", str(MAX_PENDING), "--window", str(WINDOW), "--log-level", "warning",
                 # a throwaway relay: no disk reserve, no free-space watermark (the Swift tests cover them)
                 "--min-free-bytes", "0", "--disk-reserve-bytes", "0",
                 # parts of 1 MiB (the least), so that a file of a few MB has several
                 "--blob-part-bytes", str(BLOB_PART), *self.extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            log.close()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    r = request(self, "GET", "/healthz", timeout=1)
                    if r.status == 200:
                        return r
                except OSError:
                    pass
                time.sleep(0.05)
            self.stop(quiet=True)
        raise RuntimeError("the relay did not answer /healthz; log:\n" + self.log_tail())

    def stop(self, quiet=False):
        """SIGTERM, then wait; returns the exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            return None

    def log_tail(self, n=30):
        try:
            return "".join(open(self.log_path, errors="replace").readlines()[-n:])
        except OSError:
            return ""


# ---------------------------------------------------------------- HTTP

class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    @property
    def code(self):
        return self.json.get("code") if isinstance(self.json, dict) else None

    def __repr__(self):
        b = self.body[:300].decode("utf-8", "replace")
        return f"{self.status} {b}"


def request(relay, method, path, body=None, session=None, headers=None, timeout=TIMEOUT, auth=None,
            ctype="application/json"):
    """One request on a fresh connection. body: dict/list (JSON-encoded) or bytes (sent as is);
    ctype: the Content-Type sent with a body (None: no header)."""
    h = {"Connection": "close"}
    if body is not None:
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
        if ctype is not None:
            h["Content-Type"] = ctype
    if session is not None:
        h["Authorization"] = f"Bearer {session}"
    if auth is not None:
        h["Authorization"] = auth
    h.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def is_problem(r, status, code):
    """A problem answer per protocol.md §10.1."""
    j = r.json
    return (r.status == status and r.headers.get("content-type", "").startswith("application/problem+json")
            and isinstance(j, dict) and j.get("code") == code and j.get("status") == status
            and j.get("title") == code.replace("_", " ") and "type" not in j)


def expect(name, r, status, code=None):
    """Status (and problem code) check; a status-only expectation for 2xx/401/403/404 with code."""
    if code is not None:
        return ok(name, is_problem(r, status, code), f"got {r!r}, expected {status} {code}")
    return ok(name, r.status == status, f"got {r!r}, expected {status}")


TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


def relay_time(s):
    """RFC 3339 with milliseconds and Z (protocol.md §1) → epoch seconds, or None."""
    return fmt.parse_time(s) if isinstance(s, str) and TIME_RE.fullmatch(s) else None


def new_id():
    return "m" + secrets.token_urlsafe(18)        # 25 characters of A-Z a-z 0-9 _ -


def rand_envelope(n=512):
    return fmt.b64e(os.urandom(n))


# ---------------------------------------------------------------- WebSocket

class WSClosed(Exception):
    def __init__(self, code, reason):
        super().__init__(f"closed {code} {reason!r}")
        self.code, self.reason = code, reason


class WS:
    """A subscription socket; frames that were not asked for yet are kept in order."""

    def __init__(self, relay, uid, session, auth=None):
        h = {}
        if session is not None:
            h["Authorization"] = f"Bearer {session}"
        if auth is not None:
            h["Authorization"] = auth
        self.c = ws_connect(f"ws://127.0.0.1:{relay.port}/v1/users/{uid}/subscribe", additional_headers=h,
                            open_timeout=TIMEOUT, close_timeout=2, max_size=2 ** 21, compression=None, legacy=True)
        self.buf = []

    def send(self, obj):
        self.c.send(obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":")))

    def _recv(self, timeout):
        try:
            text = self.c.recv(timeout=timeout)
        except websockets.exceptions.ConnectionClosed as e:
            rc = e.rcvd
            raise WSClosed(rc.code if rc else None, rc.reason if rc else None)
        return json.loads(text)

    def frame(self, pred=lambda f: True, timeout=TIMEOUT):
        for i, f in enumerate(self.buf):
            if pred(f):
                return self.buf.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching frame")
            f = self._recv(left)
            if pred(f):
                return f
            self.buf.append(f)

    def of(self, typ, timeout=TIMEOUT, **kw):
        return self.frame(lambda f: f.get("type") == typ and all(f.get(k) == v for k, v in kw.items()), timeout)

    def quiet(self, timeout=0.3):
        """True if no frame arrives within timeout (and none is buffered)."""
        if self.buf:
            return False
        try:
            self.buf.append(self._recv(timeout))
            return False
        except TimeoutError:
            return True

    def closed(self, timeout=TIMEOUT):
        """Waits for the close; returns (code, reason, frames seen before it)."""
        seen = list(self.buf)
        self.buf = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seen.append(self._recv(deadline - time.monotonic()))
            except WSClosed as e:
                return e.code, e.reason, seen
            except TimeoutError:
                break
        return None, None, seen

    def close(self):
        try:
            self.c.close()
        except Exception:
            pass


def ws_refused(name, relay, uid, session, code, close_code, auth=None):
    """protocol.md §8.1: a failed opening is one `error` frame, then close 4401/4403 with the code."""
    try:
        w = WS(relay, uid, session, auth)
    except Exception as e:
        return ok(name, False, f"upgrade failed: {e!r}")
    try:
        cc, reason, frames = w.closed()
        good = (len(frames) == 1 and frames[0].get("type") == "error" and frames[0].get("problem", {}).get("code") == code
                and cc == close_code and reason == code)
        return ok(name, good, f"frames {frames}, close {cc} {reason!r}; expected error {code}, close {close_code}")
    finally:
        w.close()


# ---------------------------------------------------------------- users, keys, tokens

class Issuer:
    def __init__(self):
        sk = nacl.signing.SigningKey.generate()
        self.public = fmt.paserk_public(bytes(sk.verify_key))
        self.secret = fmt.paserk_secret(bytes(sk) + bytes(sk.verify_key))
        self.kid = Key.from_paserk(self.public).to_paserk_id()

    def token(self, uid, lifetime=300, aud=AUDIENCE, **extra):
        """tokens.md §8: claims as bytes, footer {"kid": pid}, empty implicit assertion."""
        now = int(time.time())
        claims = {"sub": uid, "aud": aud, "iat": fmt.fmt_time(now), "exp": fmt.fmt_time(now + lifetime), **extra}
        return pyseto.encode(Key.from_paserk(self.secret), json.dumps(claims, separators=(",", ":"), sort_keys=True).encode(),
                             footer=json.dumps({"kid": self.kid}, separators=(",", ":")).encode()).decode()


class User:
    def __init__(self, uid):
        self.uid = uid
        self.identity = nacl.signing.SigningKey.generate()
        self.mailbox = nacl.public.PrivateKey.generate()
        self.grant = None
        self.pins = {}                                     # uid → pinned identity key (TOFU)
        self.peer_mailbox = {}                             # uid → verified mailbox public key

    @property
    def session(self):
        return self.grant["session"]

    def bundle(self, uid=None, created_at=None):
        """envelope.md §4: compact, sorted, created_at whole seconds +00:00, self-signed."""
        uid = uid or self.uid
        ik, mk = bytes(self.identity.verify_key), bytes(self.mailbox.public_key)
        created = created_at or fmt.fmt_time(int(time.time()))
        sig = self.identity.sign(fmt.pae(b"mailslot-key-bundle-v1", uid.encode(), ik, mk, created.encode())).signature
        return fmt.jdump({"version": 1, "uid": uid, "identity_key": fmt.b64e(ik), "mailbox_key": fmt.b64e(mk),
                          "created_at": created, "signature": fmt.b64e(sig)})

    def body(self, typ, payload, ts=None):
        """envelope.md §3, in the §3.4 form."""
        return fmt.jdump({"timestamp": ts if ts is not None else int(time.time() * 1000), "type": typ,
                          "sender": {"id": self.uid, "name": self.uid.capitalize()}, "payload": payload})

    def seal(self, to, mid, body):
        return fmt.seal(body, mid, self.uid, self.identity, to, self.peer_mailbox[to])


def sign_in(relay, issuer, user, name=None):
    r = request(relay, "POST", "/v1/sessions", {"token": issuer.token(user.uid)})
    g = r.json if r.status == 201 else None
    if name:
        good = (g is not None and g.get("uid") == user.uid and re.fullmatch(r"mss_[A-Za-z0-9_-]{43}", g.get("session", ""))
                and re.fullmatch(r"msr_[A-Za-z0-9_-]{43}", g.get("refresh", "")))
        ok(name, good, f"got {r!r}")
    if r.status != 201:
        raise RuntimeError(f"sign-in of {user.uid} failed: {r!r}")
    return g


def fetch_bundle(relay, me, peer_uid):
    """GET the peer's keys, verify for that uid (envelope.md §4), pin the identity key (§2.6)."""
    r = request(relay, "GET", f"/v1/users/{peer_uid}/keys", session=me.session)
    if r.status != 200:
        raise RuntimeError(f"GET keys of {peer_uid}: {r!r}")
    b = fmt.decode_bundle(r.body.decode(), peer_uid)
    ik = fmt.b64d(b["identity_key"])
    if peer_uid in me.pins and me.pins[peer_uid] != ik:
        raise RuntimeError("identity key changed: refusing to re-pin")
    me.pins[peer_uid] = ik
    me.peer_mailbox[peer_uid] = fmt.b64d(b["mailbox_key"])
    return r


def accept(me, record):
    """Open a delivered record as `me` and apply the caller's checks of envelope.md §2.6.
    Returns (sender, body, msg); raises fmt.FormatError or RuntimeError."""
    env = fmt.b64d(record["envelope"])
    if record.get("size") != len(env):
        raise RuntimeError(f"size {record.get('size')} != {len(env)}")
    sender, skey, body = fmt.open_envelope(env, record["id"], me.uid, bytes(me.mailbox))
    if sender != record["author"]:
        raise RuntimeError(f"signed sender {sender} != relay-stamped author {record['author']}")
    if sender not in me.pins:
        raise RuntimeError(f"no pinned key for {sender}")   # (the flow fetches bundles first)
    if me.pins[sender] != skey:
        raise RuntimeError("sender identity key differs from the pinned one")
    return sender, body, fmt.jload(body)


# ---------------------------------------------------------------- scenarios

class Ctx:
    pass


OWNER_ONLY = ("seq", "lease_until", "lease_holder", "envelope")


def record_shape(r, author, mid, owner_view):
    """MessageRecord (protocol.md §4.7): everyone sees id, author, created_at, expires_at, size
    (a size class); seq and envelope (and a lease) only in the owner's view. '' when fine."""
    j = r.json if isinstance(r, Resp) else r
    if not isinstance(j, dict):
        return "not an object"
    problems = [f"missing {k}" for k in ("id", "author", "created_at", "expires_at", "size") if k not in j]
    if j.get("id") != mid:
        problems.append(f"id {j.get('id')}")
    if j.get("author") != author:
        problems.append(f"author {j.get('author')}")
    if relay_time(j.get("created_at")) is None or relay_time(j.get("expires_at")) is None:
        problems.append("times not RFC 3339 with ms and Z")
    size = j.get("size")
    if not (type(size) is int and 512 <= size <= MAX_ENVELOPE and size & (size - 1) == 0):
        problems.append(f"size {size} not a size class")
    if owner_view:
        problems += [f"owner view without {k}" for k in ("seq", "envelope") if k not in j]
        if "envelope" in j and len(fmt.b64d(j["envelope"])) != size:
            problems.append("size != envelope length")
    else:
        problems += [f"sender view shows {k}" for k in OWNER_ONLY if k in j]
    problems += [f"{k} is null" for k, v in j.items() if v is None]
    return "; ".join(problems)


def scenario_start(c):
    r = c.health
    ok("GET /healthz → 200 {\"status\":\"ok\"} (§4.1)", r.status == 200 and r.json == {"status": "ok"}
       and r.headers.get("content-type", "").startswith("application/json"), repr(r))
    st = os.stat(c.relay.data)
    ok("data folder created with mode 0700 (§7)", stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode))
    ok("relay.sqlite in the data folder (§7)", os.path.exists(os.path.join(c.relay.data, "relay.sqlite")), os.listdir(c.relay.data))
    expect("unknown path → 404 not_found (§4)", request(c.relay, "GET", "/v1/nothing-here"), 404, "not_found")
    expect("known path, method not served (POST /healthz) → 404 not_found (§4)", request(c.relay, "POST", "/healthz", {}),
           404, "not_found")
    m = request(c.relay, "GET", "/metrics")
    ok("GET /metrics on a loopback relay → 200 Prometheus text (§4.1)", m.status == 200
       and m.headers.get("content-type", "").startswith("text/plain") and b"mailslot_messages_pending" in m.body, repr(m))
    r = request(c.relay, "GET", "/readyz")
    ok("GET /readyz → 200 {\"status\":\"ready\"} (§4.1)", r.status == 200 and r.json == {"status": "ready"}, repr(r))


def scenario_sign_in(c):
    for u in c.users.values():
        u.grant = sign_in(c.relay, c.issuer, u, f"sign in {u.uid}: 201 SessionGrant (§4.2)" if u.uid in ("alice", "bob") else None)
    g = c.users["alice"].grant
    now = time.time()
    exp, rexp = relay_time(g.get("expires_at")), relay_time(g.get("refresh_expires_at"))
    ok("session expires_at ≈ now + 900 s (§3)", exp is not None and abs(exp - now - 900) < 30, g.get("expires_at"))
    ok("refresh_expires_at ≈ now + 30 days (§3)", rexp is not None and abs(rexp - now - 30 * 86400) < 30, g.get("refresh_expires_at"))
    other = Issuer()
    for name, tok, detail in [
            ("token from an unknown issuer", other.token("alice"), "token_unknown_key"),
            ("token for another audience", c.issuer.token("alice", aud="elsewhere"), "token_wrong_audience"),
            ("token lifetime 3601 s", c.issuer.token("alice", lifetime=3601), "token_lifetime_too_long"),
            ("not a token", "v4.public.AAAA", "token_malformed")]:
        r = request(c.relay, "POST", "/v1/sessions", {"token": tok})
        ok(f"sign-in refuses {name}: 401 invalid_token naming {detail} (§4.2)",
           is_problem(r, 401, "invalid_token") and detail in r.json.get("detail", ""), repr(r))
    tok = c.issuer.token("carol")
    r1 = request(c.relay, "POST", "/v1/sessions", {"token": tok})
    r2 = request(c.relay, "POST", "/v1/sessions", {"token": tok})
    ok("a custom token is not spent by signing in (§3)", r1.status == 201 and r2.status == 201
       and r1.json["session"] != r2.json["session"], f"{r1!r} / {r2!r}")
    s = c.users["alice"].session
    expect("no Authorization → 401 unauthenticated (§3)", request(c.relay, "GET", "/v1/users/alice/keys"), 401, "unauthenticated")
    expect("scheme name is case-insensitive (`bEaReR`) (§3)",
           request(c.relay, "GET", "/v1/users/alice", auth=f"bEaReR {s}"), 404, "not_found")
    expect("two spaces after Bearer → 401 (§3)", request(c.relay, "GET", "/v1/users/alice", auth=f"Bearer  {s}"), 401, "unauthenticated")
    expect("Basic scheme → 401 (§3)", request(c.relay, "GET", "/v1/users/alice", auth=f"Basic {s}"), 401, "unauthenticated")
    expect("unknown mss_ session → 401 unauthenticated (§3)",
           request(c.relay, "GET", "/v1/users/alice", session="mss_" + fmt.b64e(os.urandom(32))), 401, "unauthenticated")
    expect("refresh token used as a session → 401 (§3)",
           request(c.relay, "GET", "/v1/users/alice", session=c.users["alice"].grant["refresh"]), 401, "unauthenticated")


def scenario_keys(c):
    rel, a, b = c.relay, c.users["alice"], c.users["bob"]
    for u in (a, b):
        expect(f"PUT own key bundle as {u.uid} → 204 (§4.6)", request(rel, "PUT", f"/v1/users/{u.uid}/keys", u.bundle(), u.session), 204)
    r = request(rel, "PUT", "/v1/users/alice/keys", b.bundle(), a.session)
    ok("PUT bob's bundle to alice's keys → 400 invalid_key_bundle, bundle_wrong_user (§4.6)",
       is_problem(r, 400, "invalid_key_bundle") and "bundle_wrong_user" in r.json.get("detail", ""), repr(r))
    bad = json.loads(a.bundle())
    bad["signature"] = fmt.b64e(bytes(64))
    r = request(rel, "PUT", "/v1/users/alice/keys", fmt.jdump(bad), a.session)
    ok("PUT a bundle with a bad signature → 400 invalid_key_bundle, bundle_bad_signature",
       is_problem(r, 400, "invalid_key_bundle") and "bundle_bad_signature" in r.json.get("detail", ""), repr(r))
    text = json.dumps(json.loads(a.bundle()), indent=1)                # same members, other bytes
    expect("PUT a bundle with whitespace (valid JSON) → 204", request(rel, "PUT", "/v1/users/alice/keys", text.encode(), a.session), 204)
    r = request(rel, "GET", "/v1/users/alice/keys", session=b.session)
    ok("GET alice's keys as bob: the bundle byte for byte (§4.6)", r.status == 200 and r.body == text.encode(), repr(r))
    for u in (a, b, c.users["carol"]):
        request(rel, "PUT", f"/v1/users/{u.uid}/keys", u.bundle(), u.session)
    for me, peer in ((a, b), (b, a)):
        try:
            fetch_bundle(rel, me, peer.uid)
            ok(f"{me.uid} fetches and verifies {peer.uid}'s bundle, pins the identity key (envelope.md §4)",
               me.pins[peer.uid] == bytes(peer.identity.verify_key) and me.peer_mailbox[peer.uid] == bytes(peer.mailbox.public_key),
               "keys differ")
        except Exception as e:
            ok(f"{me.uid} fetches and verifies {peer.uid}'s bundle (envelope.md §4)", False, repr(e))
    fetch_bundle(rel, b, "carol")
    expect("GET keys of a user who published none → 404 not_found (§4.6)",
           request(rel, "GET", "/v1/users/nobody/keys", session=a.session), 404, "not_found")


def scenario_chat(c):
    rel, a, b, k = c.relay, c.users["alice"], c.users["bob"], c.users["carol"]
    sent = {}                                             # id → body bytes
    # 1. a text while bob is offline, over HTTP PUT, with a ttl
    m1 = new_id()
    body1 = a.body("text", {"text": "hello, bob"})
    env1 = a.seal("bob", m1, body1)
    r = request(rel, "PUT", f"/v1/users/bob/messages/{m1}", {"envelope": fmt.b64e(env1), "ttl_seconds": 86400}, a.session)
    ok("alice PUTs a sealed text to bob → 201 (§4.7)", r.status == 201, repr(r))
    ok("sender's view of the record: id, author alice, times, size; no seq/lease/envelope (§4.7)",
       r.status == 201 and record_shape(r, "alice", m1, False) == "", record_shape(r, "alice", m1, False) if r.json else repr(r))
    if r.status == 201:
        ok("size = envelope length (512), expires_at = created_at + ttl_seconds (§4.7, §5.4)",
           r.json.get("size") == len(env1) == 512 and
           abs(relay_time(r.json["expires_at"]) - relay_time(r.json["created_at"]) - 86400) < 0.002, repr(r))
    sent[m1] = body1
    first = r.json
    r2 = request(rel, "PUT", f"/v1/users/bob/messages/{m1}", {"envelope": fmt.b64e(env1), "ttl_seconds": 5}, a.session)
    ok("identical retry (other ttl) → 200 with the stored record, unchanged (§5.1)", r2.status == 200 and r2.json == first,
       f"{r2!r} vs {first}")
    env1b = a.seal("bob", m1, body1)                     # same body, fresh seal: other bytes
    expect("same id, other envelope, same author → 409 conflict (§5.1)",
           request(rel, "PUT", f"/v1/users/bob/messages/{m1}", {"envelope": fmt.b64e(env1b)}, a.session), 409, "conflict")
    expect("same id, same envelope, other author → 409 conflict (§5.1)",
           request(rel, "PUT", f"/v1/users/bob/messages/{m1}", {"envelope": fmt.b64e(env1)}, k.session), 409, "conflict")
    # 2. bob subscribes: ready with pending 1, then the backlog
    wb = WS(rel, "bob", b.session)
    c.sockets.append(wb)
    f = wb.frame()
    ok("bob subscribes: first frame ready, pending 1 (§8.1)", f == {"type": "ready", "pending": 1, "prekeys": 0}, f)
    f = wb.of("message")
    ok("backlog delivered: message frame in the owner's view (seq, envelope) (§8.2)",
       record_shape(f["message"], "alice", m1, True) == "" and f["message"]["envelope"] == fmt.b64e(env1),
       record_shape(f["message"], "alice", m1, True))
    delivered = [f["message"]]
    # 3. live: a location over HTTP, then alice's own socket sends a text with the `send` frame
    m2 = new_id()
    body2 = a.body("location", {"location": {"latitude": 48.8584, "longitude": 2.2945}})
    r = request(rel, "PUT", f"/v1/users/bob/messages/{m2}", {"envelope": fmt.b64e(a.seal("bob", m2, body2))}, a.session)
    ok("alice PUTs a sealed location → 201", r.status == 201, repr(r))
    if r.status == 201:
        ok("default ttl is 604800 s (§4.7)", abs(relay_time(r.json["expires_at"]) - relay_time(r.json["created_at"]) - DEFAULT_TTL) < 0.002,
           repr(r))
    sent[m2] = body2
    wa = WS(rel, "alice", a.session)
    c.sockets.append(wa)
    f = wa.frame()
    ok("alice subscribes: ready, pending 0", f == {"type": "ready", "pending": 0, "prekeys": 0}, f)
    m3 = new_id()
    body3 = a.body("text", {"text": "sent over the socket \u2615 / \"quoted\""})
    frame = {"type": "send", "ref": "r-1", "to": "bob", "id": m3, "envelope": fmt.b64e(a.seal("bob", m3, body3))}
    wa.send(frame)
    f = wa.of("sent", ref="r-1")
    ok("WS send → sent, created true, the sender's view (§8.3)",
       f.get("created") is True and record_shape(f["message"], "alice", m3, False) == "", f)
    wa.send(frame)
    f2 = wa.of("sent", ref="r-1")
    ok("WS send again → sent, created false, same record (§8.3)", f2.get("created") is False and f2.get("message") == f.get("message"),
       f"{f2} vs {f}")
    sent[m3] = body3
    for _ in range(2):
        delivered.append(wb.of("message")["message"])
    ok("bob receives the live messages in ascending seq, each once (§8.2)",
       [d["id"] for d in delivered] == [m1, m2, m3] and all(x["seq"] < y["seq"] for x, y in zip(delivered, delivered[1:])),
       [(d["id"], d.get("seq")) for d in delivered])
    # 4. bob opens and verifies each, then acks
    for d in delivered:
        try:
            sender, body, msg = accept(b, d)
            ok(f"bob opens the {msg['type']} {d['id'][:8]}…: signed sender = stamped author, pinned key, body bytes (envelope.md §2.6)",
               sender == "alice" and body == sent[d["id"]], f"{sender} {body[:80]}")
        except Exception as e:
            ok(f"bob opens {d['id'][:8]}…", False, repr(e))
    for d in delivered:
        wb.send({"type": "ack", "id": d["id"]})
        f = wb.of("acked", id=d["id"])
        ok(f"ack {d['id'][:8]}… → acked (§8.3)", f == {"type": "acked", "id": d["id"]}, f)
    wb.send({"type": "ack", "id": m1})
    f = wb.of("acked", id=m1)
    ok("repeated ack → acked again (§8.3)", f == {"type": "acked", "id": m1}, f)
    r = request(rel, "GET", "/v1/users/bob/messages", session=b.session)
    ok("bob's mailbox is empty after the acks: {\"messages\":[],\"next\":null} (§4.9)",
       r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    expect("GET an acked message as the owner → 404 (§4.8)",
           request(rel, "GET", f"/v1/users/bob/messages/{m2}", session=b.session), 404, "not_found")
    expect("alice unsends an acked message → 403 forbidden (§2, §4.11)",
           request(rel, "DELETE", f"/v1/users/bob/messages/{m2}", session=a.session), 403, "forbidden")
    c.erased += [(f"acked {d['id'][:8]}", fmt.b64d(d["envelope"])) for d in delivered]
    # 5. bob answers with a read receipt over his socket; alice receives it on hers
    m4 = new_id()
    body4 = b.body("receipt", {"receipt": {"kind": "read", "message_ids": [m1, m2, m3]}})
    wb.send({"type": "send", "ref": "receipt", "to": "alice", "id": m4, "envelope": fmt.b64e(b.seal("alice", m4, body4))})
    f = wb.of("sent", ref="receipt")
    ok("bob sends a read receipt over WS → sent, sender's view (§8.3)",
       f.get("created") is True and record_shape(f["message"], "bob", m4, False) == "", f)
    d = wa.of("message")["message"]
    try:
        sender, body, msg = accept(a, d)
        ok("alice opens the receipt: from bob, kind read, the three ids", sender == "bob" and body == body4
           and msg["payload"]["receipt"] == {"kind": "read", "message_ids": [m1, m2, m3]}, msg)
    except Exception as e:
        ok("alice opens the receipt", False, repr(e))
    wa.send({"type": "ack", "id": d["id"]})
    ok("alice acks the receipt → acked", wa.of("acked", id=d["id"]).get("id") == m4, "")
    # a send to one's own mailbox shows the owner's view (§4.7)
    m6 = new_id()
    wa.send({"type": "send", "ref": "self", "to": "alice", "id": m6, "envelope": rand_envelope()})
    f = wa.of("sent", ref="self")
    ok("WS send to one's own mailbox → sent with the owner's view (seq, envelope) (§4.7, §8.3)",
       record_shape(f.get("message"), "alice", m6, True) == "", f)
    wa.of("message")
    wa.send({"type": "ack", "id": m6})
    wa.of("acked", id=m6)
    # 6. a replay: carol uploads alice's envelope as her own under the (now free) id m1
    r = request(rel, "PUT", f"/v1/users/bob/messages/{m1}", {"envelope": fmt.b64e(env1)}, k.session)
    ok("an acked id is free again: carol's upload → 201 (§5.1)", r.status == 201, repr(r))
    d = wb.of("message")["message"]
    try:
        accept(b, d)
        ok("client refuses an envelope whose signer ≠ stamped author (envelope.md §2.6 caller check 1)", False, "accepted")
    except RuntimeError as e:
        ok("client refuses an envelope whose signer ≠ stamped author (envelope.md §2.6 caller check 1)",
           d["author"] == "carol" and "stamped author" in str(e), str(e))
    wb.send({"type": "ack", "id": d["id"]})
    wb.of("acked", id=d["id"])
    # 7. one subscription per mailbox: a newer socket takes over, unacked messages come again
    m5 = new_id()
    request(rel, "PUT", f"/v1/users/bob/messages/{m5}", {"envelope": fmt.b64e(a.seal("bob", m5, a.body("text", {"text": "again"})))},
            a.session)
    d = wb.of("message")["message"]
    wb2 = WS(rel, "bob", b.session)
    c.sockets.append(wb2)
    cc, reason, _ = wb.closed()
    ok("a newer subscription closes the older with 4000 (§8.1)", cc == 4000, f"close {cc} {reason!r}")
    f = wb2.frame()
    ok("the new socket: ready pending 1, the unacked message again (§8.1)",
       f == {"type": "ready", "pending": 1, "prekeys": 0} and wb2.of("message")["message"]["id"] == m5 == d["id"], f)
    wb2.send({"type": "ack", "id": m5})
    wb2.of("acked", id=m5)
    # 8. bad frames keep the socket open (§8.3)
    for name, raw, code in [("not JSON", "not json", "invalid_json"),
                            ("duplicate member", '{"type":"ack","id":"%s","id":"%s"}' % (m5, m5), "invalid_json"),
                            ("ack without id (not a ClientFrame)", '{"type":"ack"}', "invalid_json"),
                            ("ack with a numeric id (wrong type)", '{"type":"ack","id":5}', "invalid_json"),
                            ("without type", '{"id":"%s"}' % m5, "invalid_json"),
                            ("send without envelope (not a ClientFrame)",
                             json.dumps({"type": "send", "ref": "ne", "to": "alice", "id": new_id()}), "invalid_json"),
                            ("unknown type", '{"type":"hello"}', "bad_request"),
                            ("send without ref", json.dumps({"type": "send", "to": "alice", "id": new_id(), "envelope": "AAAA"}),
                             "bad_request")]:
        wb2.send(raw)
        f = wb2.of("error")
        ok(f"WS frame {name} → error {code}{', without ref or id' if code == 'invalid_json' else ''} (§8.3)",
           f.get("problem", {}).get("code") == code and (code != "invalid_json" or ("ref" not in f and "id" not in f)), f)
    wb2.send({"type": "ack", "id": "short"})
    f = wb2.of("error")
    ok("WS ack with an invalid id → error invalid_message_id with the id (§8.3)",
       f.get("id") == "short" and f.get("problem", {}).get("code") == "invalid_message_id", f)
    wb2.send({"type": "send", "ref": "bad", "to": "bad uid", "id": new_id(), "envelope": rand_envelope()})
    f = wb2.of("error", ref="bad")
    ok("WS send to an invalid uid → error invalid_uid with the ref (§8.3)", f.get("problem", {}).get("code") == "invalid_uid", f)
    wb2.send({"type": "send", "ref": "tiny", "to": "alice", "id": new_id(), "envelope": "AAAA"})
    f = wb2.of("error", ref="tiny")
    ok("WS send of a 3-byte envelope → error invalid_envelope with the ref (§8.3)",
       f.get("problem", {}).get("code") == "invalid_envelope", f)
    wb2.send({"type": "send", "ref": "x" * 65, "to": "alice", "id": new_id(), "envelope": rand_envelope()})
    f = wb2.of("error")
    ok("WS send with a 65-byte ref → error bad_request without ref (§8.3)",
       f.get("problem", {}).get("code") == "bad_request" and "ref" not in f, f)
    wb2.send({"type": "send", "ref": "", "to": "alice", "id": new_id(), "envelope": rand_envelope()})
    f = wb2.of("error")
    ok("WS send with an empty ref → error bad_request without ref (§8.3)",
       f.get("problem", {}).get("code") == "bad_request" and "ref" not in f, f)
    wb2.send({"type": "ack", "id": m5})
    ok("socket still open after the bad frames (§8.3)", wb2.of("acked", id=m5).get("id") == m5, "")
    wb2.close()
    # 9. the 10th malformed frame closes the socket with 4002, on a fresh socket
    wb3 = WS(rel, "bob", b.session)
    c.sockets.append(wb3)
    wb3.of("ready")
    for _ in range(9):
        wb3.send("{")
    errs = [wb3.of("error") for _ in range(9)]
    ok("malformed frames 1-9 each answer error invalid_json, socket open (§8.3)",
       all(f["problem"]["code"] == "invalid_json" for f in errs), errs)
    wb3.send("[")
    cc, reason, frames = wb3.closed()
    ok("the 10th malformed frame closes the socket with 4002 (§8.3)", cc == 4002 and len(frames) <= 1,
       f"close {cc} {reason!r}, frames {frames}")
    NOTES.append(f"the 10th malformed frame got {len(frames)} error frame(s) before close {cc}")
    wa.close()


def scenario_sessions(c):
    rel, iss = c.relay, c.issuer
    u = User("erin")
    g1 = sign_in(rel, iss, u)
    r = request(rel, "POST", "/v1/sessions/refresh", {"refresh": g1["refresh"]})
    ok("refresh → 201 a new pair, same uid (§4.3)", r.status == 201 and r.json.get("uid") == "erin"
       and r.json["session"] != g1["session"] and r.json["refresh"] != g1["refresh"], repr(r))
    g2 = r.json
    expect("after a refresh the old session is dead → 401 unauthenticated (§3)",
           request(rel, "GET", "/v1/users/erin", session=g1["session"]), 401, "unauthenticated")
    expect("the new session works", request(rel, "GET", "/v1/users/erin", session=g2["session"]), 404, "not_found")
    gx = sign_in(rel, iss, u)                            # a second family of the same user
    expect("reuse of a spent refresh token → 401 refresh_reused (§4.3)",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": g1["refresh"]}), 401, "refresh_reused")
    expect("after reuse the newer session fails → 401 unauthenticated (§3)",
           request(rel, "GET", "/v1/users/erin", session=g2["session"]), 401, "unauthenticated")
    expect("after reuse the newer refresh token fails → 401 refresh_invalid (§4.3)",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": g2["refresh"]}), 401, "refresh_invalid")
    expect("the reused token presented again, its family revoked → 401 refresh_invalid, not refresh_reused (§3)",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": g1["refresh"]}), 401, "refresh_invalid")
    expect("a refresh of another form → 401 refresh_invalid, not 400 (§10.2, openapi RefreshRequest)",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": "not a refresh token at all"}), 401, "refresh_invalid")
    r = request(rel, "POST", "/v1/sessions", {"token": "v4.public." + "A" * 4100})
    expect("a custom token over 4096 bytes → 401 invalid_token, not 400 (§10.2)", r, 401, "invalid_token")
    ok("its detail ends with ': token_oversized' (§10.1)", str((r.json or {}).get("detail", "")).endswith(": token_oversized"), repr(r))
    expect("another family of the same user is untouched by the reuse",
           request(rel, "GET", "/v1/users/erin", session=gx["session"]), 404, "not_found")
    expect("refresh with garbage → 401 refresh_invalid", request(rel, "POST", "/v1/sessions/refresh", {"refresh": "msr_nope"}),
           401, "refresh_invalid")
    expect("refresh with a session token → 401 refresh_invalid",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": gx["session"]}), 401, "refresh_invalid")
    expect("refresh without the member → 400 invalid_json (§1)", request(rel, "POST", "/v1/sessions/refresh", {}), 400, "invalid_json")
    gy = sign_in(rel, iss, u)
    expect("sign-out → 204 (§4.4)", request(rel, "DELETE", "/v1/sessions/current", session=gx["session"]), 204)
    expect("signed-out session → 401 unauthenticated (§3)",
           request(rel, "GET", "/v1/users/erin", session=gx["session"]), 401, "unauthenticated")
    expect("signed-out family's refresh → 401 refresh_invalid (§3)",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": gx["refresh"]}), 401, "refresh_invalid")
    expect("sign-out again with the dead session → 401", request(rel, "DELETE", "/v1/sessions/current", session=gx["session"]),
           401, "unauthenticated")
    expect("sign-out without a session → 401", request(rel, "DELETE", "/v1/sessions/current"), 401, "unauthenticated")
    expect("another family survives a sign-out", request(rel, "GET", "/v1/users/erin", session=gy["session"]), 404, "not_found")


def scenario_rules(c):
    """protocol.md §2: every (resource, operation) that has a route, for every principal."""
    rel, a, b, k = c.relay, c.users["alice"], c.users["bob"], c.users["carol"]
    # principals toward bob's resources: owner bob, author alice (messages), other carol,
    # no session, and a signed-out session of bob himself
    gz = sign_in(rel, c.issuer, b)
    request(rel, "DELETE", "/v1/sessions/current", session=gz["session"])
    OUT = gz["session"]
    P = {"owner": b.session, "other": k.session, "none": None, "signed-out": OUT}
    AUTH = a.session
    U401 = [("none", 401, "unauthenticated"), ("signed-out", 401, "unauthenticated")]

    def R(name, method, path, who, status, code=None, body=None):
        s = P[who] if who in P else who
        label = who if who in P else "author"
        return expect(f"rules: {name} as {label} → {status}{' ' + code if code else ''}", request(rel, method, path, body, s), status, code)

    # userDocument: read · update · delete (owner)
    R("GET document (none put)", "GET", "/v1/users/bob", "owner", 404, "not_found")
    R("GET document (none put)", "GET", "/v1/users/bob", "other", 403, "forbidden")
    R("DELETE document (none put)", "DELETE", "/v1/users/bob", "owner", 404, "not_found")
    R("DELETE document (none put)", "DELETE", "/v1/users/bob", "other", 403, "forbidden")
    doc = b'{"display": "Bob", "n": 1}'
    for who, st, code in [("other", 403, "forbidden")] + U401 + [("owner", 204, None)]:
        R("PUT document", "PUT", "/v1/users/bob", who, st, code, doc)
    r = request(rel, "GET", "/v1/users/bob", session=b.session)
    ok("rules: GET document as owner → 200, the bytes as put (§4.5)", r.status == 200 and r.body == doc, repr(r))
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("GET document", "GET", "/v1/users/bob", who, st, code)
    R("PUT document that is not an object", "PUT", "/v1/users/bob", "owner", 400, "invalid_document", b"[1,2]")
    R("PUT non-object document (rule before the object check, §9)", "PUT", "/v1/users/bob", "other", 403, "forbidden", b"[1,2]")
    R("PUT malformed document body (body checks before the rule, §9)", "PUT", "/v1/users/bob", "other", 400, "invalid_json", b"{")
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("DELETE document", "DELETE", "/v1/users/bob", who, st, code)
    R("DELETE document", "DELETE", "/v1/users/bob", "owner", 204)
    R("GET document after DELETE", "GET", "/v1/users/bob", "owner", 404, "not_found")
    R("DELETE document again", "DELETE", "/v1/users/bob", "owner", 404, "not_found")
    R("GET keys after deleting the document (only the document goes, §4.5)", "GET", "/v1/users/bob/keys", "other", 200)
    # keyBundle: read (signed-in) · update · delete (owner)
    for who, st, code in [("owner", 200, None), ("other", 200, None)] + U401:
        R("GET keys", "GET", "/v1/users/bob/keys", who, st, code)
    R("GET keys", "GET", "/v1/users/bob/keys", AUTH, 200)
    bb = b.bundle()
    for who, st, code in [("other", 403, "forbidden")] + U401 + [("owner", 204, None)]:
        R("PUT keys (bob's own bundle)", "PUT", "/v1/users/bob/keys", who, st, code, bb)
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("DELETE keys", "DELETE", "/v1/users/bob/keys", who, st, code)
    R("DELETE keys", "DELETE", "/v1/users/bob/keys", "owner", 204)
    R("GET keys after DELETE", "GET", "/v1/users/bob/keys", "other", 404, "not_found")
    R("DELETE keys again", "DELETE", "/v1/users/bob/keys", "owner", 404, "not_found")
    R("DELETE keys (none published)", "DELETE", "/v1/users/bob/keys", "other", 403, "forbidden")
    R("PUT keys again", "PUT", "/v1/users/bob/keys", "owner", 204, None, bb)
    # message: create (signed-in) · read · update (owner) · delete (owner, author)
    base = "/v1/users/bob/messages/"
    for who, st, code in [("owner", 201, None), ("other", 201, None)] + U401:
        mid = new_id()
        R("PUT message (create)", "PUT", base + mid, who, st, code, {"envelope": rand_envelope()})
        if st == 201:
            request(rel, "DELETE", base + mid, session=b.session)
    R("PUT message with a bad uid, no session (authenticate first, §9)", "PUT", "/v1/users/bad%20uid/messages/" + new_id(),
      "none", 401, "unauthenticated", {"envelope": rand_envelope()})
    m1, absent = new_id(), new_id()
    env_m1 = rand_envelope()
    r = request(rel, "PUT", base + m1, {"envelope": env_m1}, a.session)
    ok("rules: setup, alice creates m1 in bob's mailbox → 201", r.status == 201, repr(r))
    for op, method, body in [("GET message", "GET", None), ("PATCH message", "PATCH", {"lease_seconds": 30, "lease_holder": "w1"})]:
        for mid, what in [(m1, "existing"), (absent, "absent")]:
            R(f"{op} ({what})", method, base + mid, AUTH, 403, "forbidden", body)
            for who, st, code in [("other", 403, "forbidden")] + U401:
                R(f"{op} ({what})", method, base + mid, who, st, code, body)
        R(f"{op} (absent)", method, base + absent, "owner", 404, "not_found", body)
    r = request(rel, "GET", base + m1, session=b.session)
    ok("rules: GET message (existing) as owner → 200, owner's view", r.status == 200 and record_shape(r, "alice", m1, True) == "",
       repr(r))
    r = request(rel, "PATCH", base + m1, {"lease_seconds": 30, "lease_holder": "w1"}, b.session)
    ok("rules: PATCH message (existing) as owner → 200 with lease_until, lease_holder (§4.10)",
       r.status == 200 and r.json.get("lease_holder") == "w1" and relay_time(r.json.get("lease_until")) is not None
       and record_shape(r, "alice", m1, True) == "", repr(r))
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("DELETE message (existing)", "DELETE", base + m1, who, st, code)
    R("DELETE message (existing, leased: still deletable, §5.3), unsend", "DELETE", base + m1, AUTH, 204)
    R("DELETE message (gone) by its former author", "DELETE", base + m1, AUTH, 403, "forbidden")
    c.erased.append(("unsent m1", fmt.b64d(env_m1)))
    for who, st, code in [("other", 403, "forbidden")] + U401 + [("owner", 404, "not_found")]:
        R("DELETE message (absent)", "DELETE", base + absent, who, st, code)
    m2 = new_id()
    request(rel, "PUT", base + m2, {"envelope": rand_envelope()}, a.session)
    R("DELETE message (existing, ack)", "DELETE", base + m2, "owner", 204)
    R("DELETE message acked by the owner, as its author", "DELETE", base + m2, AUTH, 403, "forbidden")
    R("DELETE message with an invalid id (§9: id before the rule)", "DELETE", base + "short", "other", 400, "invalid_message_id")
    # an unsend erases only the caller's own message: alice's id re-used by carol after an ack
    m7 = new_id()
    request(rel, "PUT", base + m7, {"envelope": rand_envelope()}, a.session)
    request(rel, "DELETE", base + m7, session=b.session)
    request(rel, "PUT", base + m7, {"envelope": rand_envelope()}, k.session)
    R("DELETE (unsend) of an id now holding another author's message", "DELETE", base + m7, AUTH, 403, "forbidden")
    r = request(rel, "GET", base + m7, session=b.session)
    ok("rules: … and carol's message under that id is still there (§2)", r.status == 200 and r.json.get("author") == "carol", repr(r))
    R("DELETE (unsend) by its real author", "DELETE", base + m7, k.session, 204)
    # mailbox: read (owner): list, subscribe
    m3 = new_id()
    request(rel, "PUT", base + m3, {"envelope": rand_envelope()}, a.session)
    for who, st, code in [("owner", 200, None), ("other", 403, "forbidden")] + U401:
        R("GET mailbox list", "GET", "/v1/users/bob/messages", who, st, code)
    R("GET mailbox list", "GET", "/v1/users/bob/messages", AUTH, 403, "forbidden")
    for who, st, code in [("owner", 400, "bad_request"), ("other", 403, "forbidden")] + U401:
        R("GET subscribe without upgrade", "GET", "/v1/users/bob/subscribe", who, st, code)
    ws_refused("rules: WS subscribe as other → error forbidden, close 4403 (§8.1)", rel, "bob", k.session, "forbidden", 4403)
    ws_refused("rules: WS subscribe as author → error forbidden, close 4403", rel, "bob", a.session, "forbidden", 4403)
    ws_refused("rules: WS subscribe without a session → error unauthenticated, close 4401", rel, "bob", None, "unauthenticated", 4401)
    ws_refused("rules: WS subscribe with a signed-out session → close 4401", rel, "bob", OUT, "unauthenticated", 4401)
    ws_refused("rules: WS subscribe to an invalid uid → error invalid_uid, close 4400 (§8.1)", rel, "bad%20uid", b.session,
               "invalid_uid", 4400)
    w = WS(rel, "bob", b.session)
    f = w.frame()
    ok("rules: WS subscribe as owner → ready (§8.1)", f == {"type": "ready", "pending": 1, "prekeys": 0}, f)
    d = w.of("message")["message"]
    w.send({"type": "ack", "id": d["id"]})
    ok("rules: WS ack as owner (message delete) → acked", w.of("acked", id=m3).get("id") == m3, d)
    w.close()
    # blockEntry: create · read · delete (owner)
    bl = "/v1/users/bob/blocked/carol"
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("PUT block entry", "PUT", bl, who, st, code)
    R("PUT block entry", "PUT", bl, AUTH, 403, "forbidden")
    R("PUT block entry", "PUT", bl, "owner", 204)
    R("PUT block entry again (idempotent)", "PUT", bl, "owner", 204)
    R("PUT block entry Zed", "PUT", "/v1/users/bob/blocked/Zed", "owner", 204)
    r = request(rel, "GET", "/v1/users/bob/blocked", session=b.session)
    ok("rules: GET block list as owner → 200 {\"blocked\":[\"Zed\",\"carol\"],\"next\":null} (byte order, §4.12)",
       r.status == 200 and r.json == {"blocked": ["Zed", "carol"], "next": None}, repr(r))
    r = request(rel, "GET", "/v1/users/bob/blocked?limit=1", session=b.session)
    ok("block list in pages: limit=1 → [\"Zed\"] and next \"Zed\" (§4.12)",
       r.status == 200 and r.json == {"blocked": ["Zed"], "next": "Zed"}, repr(r))
    r = request(rel, "GET", "/v1/users/bob/blocked?limit=1&after=Zed", session=b.session)
    ok("block list after=Zed → [\"carol\"], next null (§4.12)",
       r.status == 200 and r.json == {"blocked": ["carol"], "next": None}, repr(r))
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("GET block list", "GET", "/v1/users/bob/blocked", who, st, code)
    R("GET block list", "GET", "/v1/users/bob/blocked", AUTH, 403, "forbidden")
    expect("blocked author's send → 403 blocked (§4.12)",
           request(rel, "PUT", base + new_id(), {"envelope": rand_envelope()}, k.session), 403, "blocked")
    mid = new_id()
    expect("another author's send while carol is blocked → 201",
           request(rel, "PUT", base + mid, {"envelope": rand_envelope()}, a.session), 201)
    request(rel, "DELETE", base + mid, session=b.session)
    for who, st, code in [("other", 403, "forbidden")] + U401:
        R("DELETE block entry", "DELETE", bl, who, st, code)
    R("DELETE block entry", "DELETE", bl, "owner", 204)
    R("DELETE block entry again (not blocked)", "DELETE", bl, "owner", 404, "not_found")
    R("DELETE block entry (not blocked)", "DELETE", bl, "other", 403, "forbidden")
    R("PUT block entry with an invalid author uid", "PUT", "/v1/users/bob/blocked/..", "owner", 400, "invalid_uid")
    request(rel, "DELETE", "/v1/users/bob/blocked/Zed", session=b.session)
    r = request(rel, "GET", "/v1/users/bob/blocked", session=b.session)
    ok("rules: GET an empty block list → {\"blocked\":[],\"next\":null}", r.status == 200 and r.json == {"blocked": [], "next": None}, repr(r))
    mid = new_id()
    expect("after unblocking, carol's send → 201", request(rel, "PUT", base + mid, {"envelope": rand_envelope()}, k.session), 201)
    request(rel, "DELETE", base + mid, session=b.session)


def scenario_json_and_sizes(c):
    rel = c.relay
    u = c.users["lim"]
    base = "/v1/users/limbox/messages/"
    env = rand_envelope()

    def put(body, mid=None, **kw):
        return request(rel, "PUT", base + (mid or new_id()), body, u.session, **kw)

    expect("duplicate member in a message body → 400 invalid_json (§1)",
           put(('{"envelope":"%s","envelope":"%s"}' % (env, env)).encode()), 400, "invalid_json")
    expect("duplicate member after unescaping (\"envelope\" and \"envelop\\u0065\") → 400 invalid_json",
           put(('{"envelope":"%s","envelop\\u0065":"%s"}' % (env, env)).encode()), 400, "invalid_json")
    expect("duplicate member in the sign-in body → 400 invalid_json",
           request(rel, "POST", "/v1/sessions", ('{"token":"x","token":"%s"}' % c.issuer.token("lim")).encode()), 400, "invalid_json")
    expect("duplicate member in a nested unknown member → 400 invalid_json",
           put(('{"envelope":"%s","x":{"a":1,"a":2}}' % env).encode()), 400, "invalid_json")
    expect("trailing comma → 400 invalid_json", put(('{"envelope":"%s",}' % env).encode()), 400, "invalid_json")
    expect("BOM → 400 invalid_json", put(('\ufeff{"envelope":"%s"}' % env).encode()), 400, "invalid_json")
    expect("a 65-character number literal → 400 invalid_json",
           put(('{"envelope":"%s","x":%s}' % (env, "1" * 65)).encode()), 400, "invalid_json")
    nest = lambda n: "[" * n + "]" * n  # noqa: E731
    expect("nesting of exactly 16 levels (unknown member) → 201 (§1)", put(('{"envelope":"%s","x":%s}' % (env, nest(15))).encode()), 201)
    expect("nesting of 17 levels → 400 invalid_json (§1)", put(('{"envelope":"%s","x":%s}' % (env, nest(16))).encode()),
           400, "invalid_json")
    expect("envelope of the wrong JSON type → 400 invalid_json (§1)", put({"envelope": 5}), 400, "invalid_json")
    expect("body not an object → 400 invalid_json", put(b"[]"), 400, "invalid_json")
    for text, want in [("60.0", 60), ("6e1", 60), ("null", DEFAULT_TTL)]:
        r = put(('{"envelope":"%s","ttl_seconds":%s}' % (rand_envelope(), text)).encode())
        ok(f"ttl_seconds {text} → 201, ttl {want} (§1 integers)", r.status == 201 and
           abs(relay_time(r.json["expires_at"]) - relay_time(r.json["created_at"]) - want) < 0.002, repr(r))
    expect("ttl_seconds 60.5 → 400 invalid_json (§1)", put(('{"envelope":"%s","ttl_seconds":60.5}' % env).encode()), 400, "invalid_json")
    expect("ttl_seconds \"60\" → 400 invalid_json (§1)", put({"envelope": env, "ttl_seconds": "60"}), 400, "invalid_json")
    expect("ttl_seconds 0 → 400 invalid_ttl (§4.7)", put({"envelope": env, "ttl_seconds": 0}), 400, "invalid_ttl")
    expect("ttl_seconds 2592001 → 400 invalid_ttl (§4.7)", put({"envelope": env, "ttl_seconds": 2592001}), 400, "invalid_ttl")
    expect("ttl_seconds 2^63 → 400 invalid_json (out of int64, §1)",
           put(('{"envelope":"%s","ttl_seconds":9223372036854775808}' % env).encode()), 400, "invalid_json")
    expect("empty envelope → 400 invalid_envelope", put({"envelope": ""}), 400, "invalid_envelope")
    expect("padded base64url envelope → 400 invalid_envelope", put({"envelope": "AAAA" * 127 + "AA=="}), 400, "invalid_envelope")
    expect("envelope with non-canonical trailing bits → 400 invalid_envelope",
           put({"envelope": "A" * 682 + "B"}), 400, "invalid_envelope")   # 683 chars ≡ 3 mod 4, low bits of 'B' set
    expect("invalid message id → 400 invalid_message_id", put({"envelope": env}, mid="x" * 15), 400, "invalid_message_id")
    expect("invalid uid (percent-decoded: 'bad uid') → 400 invalid_uid (§1)",
           request(rel, "PUT", "/v1/users/bad%20uid/messages/" + new_id(), {"envelope": env}, u.session), 400, "invalid_uid")
    # sizes (§4.7): a size class from 512 to the maximum
    big = os.urandom(MAX_ENVELOPE)
    r = put({"envelope": fmt.b64e(big)})
    ok("envelope of exactly the maximum (65536 bytes) → 201, size 65536", r.status == 201 and r.json.get("size") == MAX_ENVELOPE, repr(r))
    expect("envelope of 65537 bytes → 413 envelope_too_large (§4.7)", put({"envelope": fmt.b64e(big + b"x")}), 413, "envelope_too_large")
    expect("envelope of 131072 bytes (body over 91477) → 413 body_too_large (§4.7, §11)",
           put({"envelope": fmt.b64e(big + big)}), 413, "body_too_large")
    for n in (1, 3, 511, 513, 1000, 1536, 65535):
        expect(f"envelope of {n} bytes (not a size class) → 400 invalid_envelope (§4.7)",
               put({"envelope": fmt.b64e(os.urandom(n))}), 400, "invalid_envelope")
    for n in (1024, 2048):
        r = put({"envelope": fmt.b64e(os.urandom(n))})
        ok(f"envelope of {n} bytes (a size class) → 201, size {n}", r.status == 201 and r.json.get("size") == n, repr(r))
    expect("document over 16384 bytes → 413 body_too_large (§4.5)",
           request(rel, "PUT", "/v1/users/lim", ('{"x":"%s"}' % ("y" * 16400)).encode(), u.session), 413, "body_too_large")
    expect("key bundle body over 4096 bytes → 413 body_too_large (§11)",
           request(rel, "PUT", "/v1/users/lim/keys", ('{"x":"%s"}' % ("y" * 4100)).encode(), u.session), 413, "body_too_large")
    expect("PATCH body over 4096 bytes → 413 body_too_large (§11)",
           request(rel, "PATCH", f"/v1/users/lim/messages/{new_id()}", ('{"lease_seconds":1,"x":"%s"}' % ("y" * 4100)).encode(),
                   u.session), 413, "body_too_large")
    # Content-Type (§1)
    doc = b'{"a":1}'
    for name, ct, st, code in [("text/plain", "text/plain", 415, "unsupported_media_type"),
                               ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
                               ("application/json; charset=utf-8", "application/json; charset=utf-8", 204, None),
                               ("APPLICATION/JSON (case-insensitive)", "APPLICATION/JSON", 204, None),
                               ("no Content-Type (read as JSON)", None, 204, None)]:
        expect(f"PUT document with {name} → {st}{' ' + code if code else ''} (§1)",
               request(rel, "PUT", "/v1/users/lim", doc, u.session, ctype=ct), st, code)
    expect("PUT someone else's document with text/plain → 415 (media type before the rule, §9)",
           request(rel, "PUT", "/v1/users/bob", doc, u.session, ctype="text/plain"), 415, "unsupported_media_type")
    expect("PUT document with text/plain and no session → 401 (authenticate first, §9)",
           request(rel, "PUT", "/v1/users/lim", doc, None, ctype="text/plain"), 401, "unauthenticated")
    expect("sign-in with text/plain → 415 (§9)",
           request(rel, "POST", "/v1/sessions", {"token": c.issuer.token("lim")}, ctype="text/plain"), 415, "unsupported_media_type")
    expect("refresh with text/plain → 415", request(rel, "POST", "/v1/sessions/refresh", {"refresh": "msr_x"}, ctype="text/plain"),
           415, "unsupported_media_type")
    expect("PUT message with text/plain → 415", put({"envelope": env}, ctype="text/plain"), 415, "unsupported_media_type")
    expect("PUT keys with text/plain → 415", request(rel, "PUT", "/v1/users/lim/keys", u.bundle(), u.session, ctype="text/plain"),
           415, "unsupported_media_type")
    expect("PATCH with text/plain → 415", request(rel, "PATCH", f"/v1/users/lim/messages/{new_id()}", {"lease_seconds": 1}, u.session,
                                                  ctype="text/plain"), 415, "unsupported_media_type")
    expect("DELETE with a Content-Type text/plain: header ignored (no body) → 204 (§1)",
           request(rel, "DELETE", "/v1/users/lim", None, u.session, headers={"Content-Type": "text/plain"}), 204)


def scenario_paging(c):
    rel, a, b = c.relay, c.users["carol"], c.users["bob"]
    base = "/v1/users/bob/messages"
    ids = [new_id() for _ in range(3)]
    for mid in ids:
        request(rel, "PUT", f"{base}/{mid}", {"envelope": rand_envelope()}, a.session)
    r1 = request(rel, "GET", f"{base}?limit=2", session=b.session)
    ok("list limit=2: two messages, next = seq of the last (§5.2)", r1.status == 200 and [m["id"] for m in r1.json["messages"]] == ids[:2]
       and r1.json.get("next") == str(r1.json["messages"][1]["seq"]), repr(r1))
    r2 = request(rel, "GET", f"{base}?limit=2&after={r1.json.get('next')}", session=b.session)
    ok("list after=next: the last message, next null (§4.9)", r2.status == 200 and [m["id"] for m in r2.json["messages"]] == ids[2:]
       and "next" in r2.json and r2.json["next"] is None, repr(r2))
    r3 = request(rel, "GET", f"{base}?limit=3", session=b.session)
    ok("list limit = exactly the remaining messages: the last page, next null (§5.2)",
       r3.status == 200 and len(r3.json["messages"]) == 3 and "next" in r3.json and r3.json["next"] is None, repr(r3))
    ok("listed records are the owner's view", all(record_shape(m, "carol", m["id"], True) == "" for m in r3.json["messages"]), r3.json)
    for q, code in [("after=01", "invalid_cursor"), ("after=-1", "invalid_cursor"), ("after=%2B1", "invalid_cursor"),
                    ("after=9223372036854775808", "invalid_cursor"), ("limit=0", "bad_request"), ("limit=501", "bad_request"),
                    ("limit=x", "bad_request")]:
        expect(f"list ?{q} → 400 {code} (§4.9)", request(rel, "GET", f"{base}?{q}", session=b.session), 400, code)
    expect("list ?limit=x as non-owner → 400 bad_request (limit checked first, §9)",
           request(rel, "GET", f"{base}?limit=x", session=a.session), 400, "bad_request")
    expect("list ?after=01 as non-owner → 403 (rule before cursor, §9)",
           request(rel, "GET", f"{base}?after=01", session=a.session), 403, "forbidden")
    r = request(rel, "GET", f"{base}?after=99999999", session=b.session)
    ok("any non-negative cursor is accepted (§5.2)", r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    for mid in ids:
        request(rel, "DELETE", f"{base}/{mid}", session=b.session)


def scenario_leases(c):
    rel, k, b = c.relay, c.users["carol"], c.users["bob"]
    mid = new_id()
    path = f"/v1/users/bob/messages/{mid}"
    request(rel, "PUT", path, {"envelope": rand_envelope()}, k.session)

    def patch(body):
        return request(rel, "PATCH", path, body, b.session)
    t0 = time.time()
    r = patch({"lease_seconds": 30, "lease_holder": "w1"})
    lu = relay_time((r.json or {}).get("lease_until"))
    ok("w1 takes a 30 s lease → 200, lease_holder w1, lease_until ≈ now + 30 (§5.3)",
       r.status == 200 and r.json.get("lease_holder") == "w1" and lu is not None and abs(lu - t0 - 30) < 5, repr(r))
    expect("w2 takes while w1's lease runs → 409 conflict (§5.3)", patch({"lease_seconds": 30, "lease_holder": "w2"}), 409, "conflict")
    expect("release without a holder (\"\") while w1's lease runs → 409 conflict (§5.3)", patch({"lease_seconds": 0}), 409, "conflict")
    expect("w2 releases w1's running lease → 409 conflict", patch({"lease_seconds": 0, "lease_holder": "w2"}), 409, "conflict")
    r = patch({"lease_seconds": 10, "lease_holder": "w1"})
    lu2 = relay_time((r.json or {}).get("lease_until"))
    ok("w1 renews with 10 s → 200, a shorter lease_until (§5.3)", r.status == 200 and lu2 is not None and lu is not None and lu2 < lu,
       repr(r))
    r = patch({"lease_seconds": 0, "lease_holder": "w1"})
    ok("w1 releases → 200, no lease members (§5.3)", r.status == 200 and not ({"lease_until", "lease_holder"} & set(r.json)), repr(r))
    r = patch({"lease_seconds": 0})
    ok("release with no lease set → 200, unchanged (§5.3)", r.status == 200 and not ({"lease_until", "lease_holder"} & set(r.json)),
       repr(r))
    r = patch({"lease_seconds": 1, "lease_holder": None})
    ok("take with lease_holder null → 200, lease_holder \"\" (§4.10)", r.status == 200 and r.json.get("lease_holder") == "", repr(r))
    r = request(rel, "GET", "/v1/users/bob/messages", session=b.session)
    ok("a leased message is still listed (§5.3)", r.status == 200 and mid in [m["id"] for m in r.json.get("messages", [])], repr(r))
    time.sleep(1.1)
    r = request(rel, "GET", path, session=b.session)
    ok("a lease that ran out stays in the record with its past lease_until (§5.3)",
       r.status == 200 and r.json.get("lease_holder") == "" and (relay_time(r.json.get("lease_until")) or 1e18) < time.time(), repr(r))
    r = patch({"lease_seconds": 5, "lease_holder": "w2"})
    ok("another holder takes an expired lease → 200 (§5.3)", r.status == 200 and r.json.get("lease_holder") == "w2", repr(r))
    for body, name in [({"lease_seconds": 3601}, "lease_seconds 3601"), ({"lease_seconds": -1}, "lease_seconds -1"),
                       ({"lease_seconds": 5, "lease_holder": "h" * 65}, "lease_holder of 65 bytes"),
                       ({}, "lease_seconds missing")]:
        expect(f"PATCH {name} → 400 invalid_lease (§4.10)", patch(body), 400, "invalid_lease")
    expect("PATCH lease_seconds \"5\" (wrong type) → 400 invalid_json (§1)", patch({"lease_seconds": "5"}), 400, "invalid_json")
    expect("owner DELETE of a message leased by w2 → 204 (§5.3)", request(rel, "DELETE", path, session=b.session), 204)


def scenario_expiry(c):
    rel, a, b = c.relay, c.users["alice"], c.users["bob"]
    base = "/v1/users/bob/messages/"
    mid, env = new_id(), rand_envelope()
    mid2, env2 = new_id(), rand_envelope()
    mid3 = new_id()
    r = request(rel, "PUT", base + mid, {"envelope": env, "ttl_seconds": 1}, a.session)
    ok("ttl_seconds 1 → 201", r.status == 201, repr(r))
    first_created = relay_time((r.json or {}).get("created_at")) or 0
    request(rel, "PUT", base + mid2, {"envelope": env2, "ttl_seconds": 1}, a.session)
    request(rel, "PUT", base + mid3, {"envelope": rand_envelope(), "ttl_seconds": 1}, a.session)
    time.sleep(1.2)
    expect("expired message: owner GET → 404 (§5.4)", request(rel, "GET", base + mid, session=b.session), 404, "not_found")
    expect("expired message: owner PATCH → 404 (§5.4)",
           request(rel, "PATCH", base + mid, {"lease_seconds": 5}, b.session), 404, "not_found")
    expect("expired message: other GET → 403 (§2)", request(rel, "GET", base + mid, session=c.users["carol"].session), 403, "forbidden")
    r = request(rel, "GET", "/v1/users/bob/messages", session=b.session)
    ok("expired messages are not listed (§5.4)", r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    expect("expired message: the author can no longer unsend → 403 (§5.4)",
           request(rel, "DELETE", base + mid, session=a.session), 403, "forbidden")
    expect("expired message: another user's DELETE → 403 (§2)",
           request(rel, "DELETE", base + mid, session=c.users["carol"].session), 403, "forbidden")
    w = WS(rel, "bob", b.session)
    f = w.frame()
    ok("expired messages are not counted in ready.pending, not delivered (§5.4)", f == {"type": "ready", "pending": 0, "prekeys": 0} and w.quiet(0.3),
       f"{f} {w.buf}")
    w.send({"type": "ack", "id": mid3})
    try:
        ok("WS ack of an expired message → acked (§5.4, §8.3)", w.of("acked", id=mid3).get("id") == mid3, "")
    except Exception as e:
        ok("WS ack of an expired message → acked (§5.4, §8.3)", False, repr(e))
    w.close()
    expect("expired message: owner DELETE erases it but answers 404 (§5.4)",
           request(rel, "DELETE", base + mid2, session=b.session), 404, "not_found")
    r = request(rel, "PUT", base + mid, {"envelope": rand_envelope()}, a.session)
    ok("a create (same author, other envelope) under an expired, unswept id erases it and proceeds → 201, a new record (§5.1)",
       r.status == 201 and (relay_time(r.json.get("created_at")) or 0) > first_created, repr(r))
    env_new = rand_envelope()
    r = request(rel, "PUT", base + mid2, {"envelope": env_new}, c.users["carol"].session)
    ok("another author's create under an expired (already erased) id → 201", r.status == 201, repr(r))
    for m in (mid, mid2):
        request(rel, "DELETE", base + m, session=b.session)
    c.last_erasure = time.monotonic()


def scenario_mailbox_full(c):
    rel = c.relay
    dora, filler, k = c.users["dora"], c.users["filler"], c.users["carol"]
    base = "/v1/users/dora/messages/"
    ids, envs, codes = [], [], []
    for i in range(MAX_PENDING):
        mid, env = new_id(), rand_envelope()
        ids.append(mid)
        envs.append(env)
        codes.append(request(rel, "PUT", base + mid, {"envelope": env}, filler.session).status)
    ok(f"{MAX_PENDING} messages fill dora's mailbox (--max-pending {MAX_PENDING}) → all 201", codes == [201] * MAX_PENDING, codes)
    r = request(rel, "PUT", base + new_id(), {"envelope": rand_envelope()}, filler.session)
    ok("one more → 429 mailbox_full without Retry-After (§5.5)", is_problem(r, 429, "mailbox_full") and "retry-after" not in r.headers
       and "retry_after" not in r.json, repr(r))
    expect("another author → 429 mailbox_full too", request(rel, "PUT", base + new_id(), {"envelope": rand_envelope()}, k.session),
           429, "mailbox_full")
    expect("identical retry into a full mailbox → 200 (§9)", request(rel, "PUT", base + ids[0], {"envelope": envs[0]}, filler.session), 200)
    expect("conflicting id into a full mailbox → 409 (id taken before pending, §9)",
           request(rel, "PUT", base + ids[0], {"envelope": rand_envelope()}, filler.session), 409, "conflict")
    wf = WS(rel, "filler", filler.session)
    wf.frame()
    wf.send({"type": "send", "ref": "full", "to": "dora", "id": new_id(), "envelope": rand_envelope()})
    f = wf.of("error", ref="full")
    ok("WS send into a full mailbox → error mailbox_full (429) with the ref (§8.3)",
       f.get("problem", {}).get("code") == "mailbox_full" and f["problem"].get("status") == 429, f)
    wf.close()
    expect("the owner acks one → 204", request(rel, "DELETE", base + ids[0], session=dora.session), 204)
    expect("then a new message fits → 201", request(rel, "PUT", base + new_id(), {"envelope": rand_envelope()}, k.session), 201)


def scenario_rate(c):
    rel, u = c.relay, c.users["flood"]
    codes, first = [], None
    t0 = time.monotonic()
    for i in range(CREATE_BURST):
        mid, env = new_id(), rand_envelope()
        r = request(rel, "PUT", f"/v1/users/sink{i:02d}/messages/{mid}", {"envelope": env}, u.session)
        codes.append(r.status)
        first = first or (f"/v1/users/sink{i:02d}/messages/{mid}", env)
    ok(f"a burst of {CREATE_BURST} creates (--create-burst {CREATE_BURST}) → all 201", codes == [201] * CREATE_BURST, codes)
    r = request(rel, "PUT", f"/v1/users/sinkx/messages/{new_id()}", {"envelope": rand_envelope()}, u.session)
    ra = r.headers.get("retry-after", "")
    ok("one more → 429 rate_limited with Retry-After = retry_after ≥ 1 (§5.5, §10.1)",
       is_problem(r, 429, "rate_limited") and ra.isdigit() and int(ra) >= 1 and r.json.get("retry_after") == int(ra),
       f"{r!r} Retry-After {ra!r} after {time.monotonic() - t0:.2f}s")
    expect("identical retry while rate-limited → 200, before the rate limit (§5.1)",
           request(rel, "PUT", first[0], {"envelope": first[1]}, u.session), 200)
    expect("conflicting id while rate-limited → 429 (rate before id taken, §9)",
           request(rel, "PUT", first[0], {"envelope": rand_envelope()}, u.session), 429, "rate_limited")
    expect("invalid_envelope while rate-limited → 400 (checked before the rate, §9)",
           request(rel, "PUT", f"/v1/users/sinkx/messages/{new_id()}", {"envelope": ""}, u.session), 400, "invalid_envelope")
    wf = WS(rel, "flood", u.session)
    wf.frame()
    wf.send({"type": "send", "ref": "rl", "to": "sinkx", "id": new_id(), "envelope": rand_envelope()})
    f = wf.of("error", ref="rl")
    ok("WS send while rate-limited → error rate_limited with retry_after (§8.3 same rate limit)",
       f.get("problem", {}).get("code") == "rate_limited" and isinstance(f["problem"].get("retry_after"), int), f)
    wf.close()
    expect("other authors are not limited by flood's bucket (per author, §5.5)",
           request(rel, "PUT", f"/v1/users/sinkx/messages/{new_id()}", {"envelope": rand_envelope()}, c.users["carol"].session), 201)
    wait = int(ra) if ra.isdigit() else 2
    if wait <= 5:
        time.sleep(wait + 0.05)
        expect(f"after Retry-After ({wait} s) a create succeeds", request(rel, "PUT", f"/v1/users/sinkx/messages/{new_id()}",
                                                                             {"envelope": rand_envelope()}, u.session), 201)
    else:
        ok("Retry-After is small for --create-rate 0.5", False, f"Retry-After {wait}")


def scenario_prekeys(c):
    """protocol.md §4.14, with the relay's default limits (200 prekeys; claims of one user's
    prekeys 0.2/s, burst 30)."""
    rel, p, q, x = c.relay, c.users["pia"], c.users["quin"], c.users["rex"]
    for u in (p, q, x):
        u.grant = sign_in(rel, c.issuer, u)
    path = "/v1/users/pia/prekeys"

    def keys(ids):
        return [{"id": i, "key": fmt.b64e(bytes(nacl.public.PrivateKey.generate().public_key))} for i in ids]

    def count():
        r = request(rel, "GET", path, session=p.session)
        return r.json.get("count") if r.status == 200 and isinstance(r.json, dict) else repr(r)

    def claim(u):
        return request(rel, "POST", path + "/claim", {}, u.session if u else None)

    up = keys(range(1, 4))
    r = request(rel, "POST", path, {"prekeys": up}, p.session)
    ok("POST prekeys as owner → 200 {\"count\":3} (§4.14)", r.status == 200 and r.json == {"count": 3}, repr(r))
    r = request(rel, "POST", path, {"prekeys": up[:2]}, p.session)
    ok("the same prekeys again → 200 {\"count\":3}: a retry adds nothing", r.status == 200 and r.json == {"count": 3}, repr(r))
    expect("a new id beside a stored id with another key → 409 prekey_conflict",
           request(rel, "POST", path, {"prekeys": keys([4]) + keys([2])}, p.session), 409, "prekey_conflict")
    ok("nothing of the refused upload was stored: count 3", count() == 3, count())
    for name, body in [("no entries", {"prekeys": []}), ("id 0", {"prekeys": [{"id": 0, "key": up[0]["key"]}]}),
                       ("an id twice", {"prekeys": keys([7]) + keys([7])}),
                       ("a 31-byte key", {"prekeys": [{"id": 9, "key": fmt.b64e(secrets.token_bytes(31))}]}),
                       ("a padded key", {"prekeys": [{"id": 9, "key": up[0]["key"] + "="}]}),
                       ("the all-zero key (a low-order point)", {"prekeys": [{"id": 9, "key": fmt.b64e(bytes(32))}]}),
                       ("101 entries", {"prekeys": keys(range(10, 111))})]:
        expect(f"an upload with {name} → 400 invalid_prekey", request(rel, "POST", path, body, p.session), 400, "invalid_prekey")
    expect("an id over 32 bits → 400 invalid_json",
           request(rel, "POST", path, {"prekeys": [{"id": 4294967296, "key": up[0]["key"]}]}, p.session), 400, "invalid_json")
    expect("POST prekeys as another user → 403 forbidden (§2)", request(rel, "POST", path, {"prekeys": keys([50])}, q.session), 403, "forbidden")
    expect("GET prekeys as another user → 403 forbidden", request(rel, "GET", path, session=q.session), 403, "forbidden")
    expect("DELETE prekeys as another user → 403 forbidden", request(rel, "DELETE", path, session=q.session), 403, "forbidden")
    expect("POST prekeys without a session → 401", request(rel, "POST", path, {"prekeys": keys([50])}), 401, "unauthenticated")
    expect("a claim without a session → 401", claim(None), 401, "unauthenticated")
    ok("still 3 after the refusals", count() == 3, count())

    r = request(rel, "POST", path, {"prekeys": keys(range(100, 200))}, p.session)
    ok("100 more → count 103", r.status == 200 and r.json == {"count": 103}, repr(r))
    r = request(rel, "POST", path, {"prekeys": keys(range(200, 297))}, p.session)
    ok("97 more → count 200, the limit", r.status == 200 and r.json == {"count": 200}, repr(r))
    expect("one more → 409 too_many_prekeys", request(rel, "POST", path, {"prekeys": keys([300])}, p.session), 409, "too_many_prekeys")

    r = claim(q)
    ok("quin claims pia's prekey of the lowest id → 200 {\"prekey\":{id 1, its key}}", r.status == 200 and r.json == {"prekey": up[0]}, repr(r))
    r = request(rel, "POST", path + "/claim", session=q.session)
    ok("a claim without a body → the next, id 2", r.status == 200 and r.json == {"prekey": up[1]}, repr(r))
    ok("claimed prekeys are gone: count 198", count() == 198, count())
    w = WS(rel, "pia", p.session)
    c.sockets.append(w)
    f = w.frame()
    ok("pia subscribes: ready counts her prekeys, {\"prekeys\":198} (§8.4)", f == {"type": "ready", "pending": 0, "prekeys": 198}, f)
    w.close()
    expect("DELETE prekeys as owner → 204", request(rel, "DELETE", path, session=p.session), 204)
    r = claim(q)
    ok("a claim with none left → 200 {\"prekey\":null}", r.status == 200 and r.json == {"prekey": None} and b'"prekey":null' in r.body, repr(r))
    expect("DELETE prekeys again → 204", request(rel, "DELETE", path, session=p.session), 204)

    request(rel, "POST", path, {"prekeys": keys([1])}, p.session)
    expect("pia blocks rex → 204", request(rel, "PUT", "/v1/users/pia/blocked/rex", session=p.session), 204)
    expect("rex's claim → 403 blocked, as his sends (§4.12)", claim(x), 403, "blocked")
    request(rel, "DELETE", "/v1/users/pia/blocked/rex", session=p.session)
    expect("PUT pia's bundle → 204", request(rel, "PUT", "/v1/users/pia/keys", p.bundle(), p.session), 204)
    p.mailbox = nacl.public.PrivateKey.generate()
    request(rel, "PUT", "/v1/users/pia/keys", p.bundle(), p.session)
    ok("a new mailbox key, the same identity: the prekey stays", count() == 1, count())
    p.identity = nacl.signing.SigningKey.generate()
    expect("PUT a bundle of another identity → 204", request(rel, "PUT", "/v1/users/pia/keys", p.bundle(), p.session), 204)
    ok("another identity's bundle erased the old identity's prekeys: count 0 (§4.6)", count() == 0, count())

    # §4.14, §8.4: a claim that leaves fewer than 25 sends the owner's subscription one
    # {"type":"prekeys","prekeys":N}, once per crossing of the mark.
    request(rel, "POST", path, {"prekeys": keys(range(1, 27))}, p.session)
    w = WS(rel, "pia", p.session)
    c.sockets.append(w)
    f = w.frame()
    ok("pia subscribes with 26 prekeys: ready says 26", f == {"type": "ready", "pending": 0, "prekeys": 26}, f)
    r = claim(x)
    ok("rex's claim leaves 25: no frame", r.status == 200 and w.quiet(0.3), repr(r))
    r = claim(x)
    f = w.frame() if r.status == 200 else repr(r)
    ok("rex's claim leaves 24 → pia gets {\"type\":\"prekeys\",\"prekeys\":24} (§8.4)", f == {"type": "prekeys", "prekeys": 24}, f)
    r = claim(x)
    ok("one more claim below the mark: no frame", r.status == 200 and w.quiet(0.3), repr(r))
    w.close()
    expect("DELETE prekeys as owner → 204", request(rel, "DELETE", path, session=p.session), 204)

    # One claimer's share of the owner's bucket (half of burst 30, 0.1/s) was drawn on above;
    # claims by one claimer (burst 60) reach it first. Each successful claim is another prekey.
    request(rel, "POST", path, {"prekeys": keys(range(1, 41))}, p.session)
    ids, limited = [], None
    for _ in range(40):
        r = claim(q)
        if r.status != 200:
            limited = r
            break
        ids.append(r.json["prekey"]["id"])
    ra = limited.headers.get("retry-after", "") if limited else ""
    ok("one claimer's claims of one user's prekeys → 429 prekey_claims_limited, Retry-After 10, before 16 (§4.14)",
       limited is not None and is_problem(limited, 429, "prekey_claims_limited") and ra == "10" and limited.json.get("retry_after") == 10
       and len(ids) < 16,
       f"{limited!r} Retry-After {ra!r} after {len(ids)} claims")
    ok("the claims before it: ids 1, 2, … in order, each once", ids == list(range(1, len(ids) + 1)), ids)
    ok("a refused claim takes nothing", count() == 40 - len(ids), count())


def scenario_window(c):
    """§8.2: at most --window unacknowledged deliveries per socket; an erased delivery keeps its
    slot until acked; §8.3: an oversized frame closes with 1009 and loses nothing."""
    rel, f_, w_ = c.relay, c.users["filler"], c.users["winnie"]
    ids = [new_id() for _ in range(WINDOW + 2)]
    codes = [request(rel, "PUT", f"/v1/users/winnie/messages/{m}", {"envelope": rand_envelope()}, f_.session).status for m in ids]
    ok(f"setup: {len(ids)} messages for winnie → 201", codes == [201] * len(ids), codes)
    w = WS(rel, "winnie", w_.session)
    c.sockets.append(w)
    f = w.frame()
    ok(f"ready pending {len(ids)}", f == {"type": "ready", "pending": len(ids), "prekeys": 0}, f)
    got = [w.of("message")["message"]["id"] for _ in range(WINDOW)]
    ok(f"the first {WINDOW} (= --window) are delivered in order, then nothing (§8.2)", got == ids[:WINDOW] and w.quiet(0.4),
       f"{got} {w.buf}")
    expect("REST DELETE of a delivered message → 204", request(rel, "DELETE", f"/v1/users/winnie/messages/{ids[0]}",
                                                                 session=w_.session), 204)
    ok("an erased delivery keeps its window slot: still nothing delivered (§8.2)", w.quiet(0.4), w.buf)
    w.send({"type": "ack", "id": ids[0]})
    ok("acking the erased delivery → acked, and the next message arrives (§8.2)",
       w.of("acked", id=ids[0]).get("id") == ids[0] and w.of("message")["message"]["id"] == ids[WINDOW], "")
    w.send({"type": "ack", "id": ids[1]})
    w.of("acked", id=ids[1])
    ok("each ack frees one slot", w.of("message")["message"]["id"] == ids[WINDOW + 1], "")
    for m in ids[2:-1]:
        w.send({"type": "ack", "id": m})
        w.of("acked", id=m)
    w.send("{" + " " * (4 * MAX_ENVELOPE // 3 + 4096) + "}")           # one byte over the frame limit
    cc, reason, frames = w.closed()
    ok("a frame over the frame limit (4/3 × max envelope + 4096) closes with 1009, no error frame (§8.3)",
       cc == 1009 and not frames, f"close {cc} {reason!r}, frames {frames}")
    w2 = WS(rel, "winnie", w_.session)
    c.sockets.append(w2)
    f = w2.frame()
    ok("after the 1009 close the unacked message is delivered again (§8.2)",
       f == {"type": "ready", "pending": 1, "prekeys": 0} and w2.of("message")["message"]["id"] == ids[-1], f)
    w2.send({"type": "ack", "id": ids[-1]})
    w2.of("acked", id=ids[-1])
    w2.close()


def scenario_socket_sessions(c):
    """§3, §8.5: sign-out and refresh end the sockets opened with the old session, with 4001 within 5 s."""
    rel = c.relay
    ga = sign_in(rel, c.issuer, c.users["dora"])
    gb = sign_in(rel, c.issuer, c.users["gina"])
    gc1 = sign_in(rel, c.issuer, c.users["hana"])
    gc2 = request(rel, "POST", "/v1/sessions/refresh", {"refresh": gc1["refresh"]}).json
    wa, wb, wc = WS(rel, "dora", ga["session"]), WS(rel, "gina", gb["session"]), WS(rel, "hana", gc2["session"])
    c.sockets += [wa, wb, wc]
    ok("three sockets open → ready", all(w.frame().get("type") == "ready" for w in (wa, wb, wc)), "")
    t0 = time.monotonic()
    expect("sign-out of the first socket's session → 204", request(rel, "DELETE", "/v1/sessions/current", session=ga["session"]), 204)
    r = request(rel, "POST", "/v1/sessions/refresh", {"refresh": gb["refresh"]})
    expect("refresh of the second socket's session → 201", r, 201)
    expect("reuse of the third family's spent refresh token → 401 refresh_reused",
           request(rel, "POST", "/v1/sessions/refresh", {"refresh": gc1["refresh"]}), 401, "refresh_reused")
    for w, what in [(wa, "sign-out"), (wb, "refresh rotation"), (wc, "refresh reuse (family revoked)")]:
        cc, reason, frames = w.closed(timeout=max(0.5, t0 + 7 - time.monotonic()))
        ok(f"{what}: the socket closes with 4001 within 5 s (§8.5)", cc == 4001 and time.monotonic() - t0 < 6.5,
           f"close {cc} {reason!r} after {time.monotonic() - t0:.1f}s, frames {frames}")
    if r.status == 201:
        w = WS(rel, "gina", r.json["session"])
        c.sockets.append(w)
        ok("subscribing again with the new session → ready", w.frame().get("type") == "ready", "")
        w.close()


def db_bytes(c):
    blobs = b""
    for name in sorted(os.listdir(c.relay.data)):
        if name.startswith("relay.sqlite"):
            with open(os.path.join(c.relay.data, name), "rb") as fh:
                blobs += fh.read()
    return blobs


def in_files(envelope, blobs):
    """Whether bytes 102..162 of `envelope` are in `blobs`, as bytes or as the base64url text the
    relay stores (spec/protocol.md §7): the probe must be able to find either form."""
    text = fmt.b64e(envelope).encode("ascii")
    return envelope[102:162] in blobs or text[136:216] in blobs


def scenario_erasure(c):
    """§6: after every kind of erasure the ciphertext is in neither database file within
    erasureDelay (1 s). The last two kinds are checked alone, so no other erasure's checkpoint
    can hide a missing one."""
    rel, a, b = c.relay, c.users["alice"], c.users["bob"]
    base = "/v1/users/bob/messages/"
    kept = os.urandom(1024)
    x1, e1, x2, e2 = new_id(), os.urandom(512), new_id(), os.urandom(512)
    ok("setup: a message that stays, two that expire in 1 s → 201",
       [request(rel, "PUT", base + m, {"envelope": fmt.b64e(e), **t}, a.session).status
        for m, e, t in [(new_id(), kept, {}), (x1, e1, {"ttl_seconds": 1}), (x2, e2, {"ttl_seconds": 1})]] == [201] * 3, "")
    time.sleep(1.6)
    blobs = db_bytes(c)
    ok("control: a stored envelope is found in the database files", in_files(kept, blobs), os.listdir(c.relay.data))
    for label, env in c.erased:
        ok(f"erased envelope ({label}) is in no database file (§6)", not in_files(env, blobs), "still found")
    expect("owner DELETE of an expired message → 404", request(rel, "DELETE", base + x1, session=b.session), 404, "not_found")
    time.sleep(1.5)
    blobs = db_bytes(c)
    ok("an expired message erased by the owner's DELETE is in no database file 1.5 s later (§6)", not in_files(e1, blobs), "still found")
    ok("control: the other expired (unswept) message is still in the files", in_files(e2, blobs), "not found")
    expect("a create reusing the other expired id → 201", request(rel, "PUT", base + x2, {"envelope": rand_envelope()}, a.session), 201)
    time.sleep(1.5)
    ok("an expired message erased by a create reusing its id is in no database file 1.5 s later (§6)",
       not in_files(e2, db_bytes(c)), "still found")


def usage_errors(binary, tmp):
    """§11: a value the relay cannot use stops `serve` with exit 64 and `Error: …`."""
    iss = Issuer()
    for flags, needle in [(["--window", "0"], "--window"), (["--create-rate", "0.001"], "--create-rate"),
                          (["--max-envelope-bytes", "1000"], "--max-envelope-bytes"), (["--max-pending", "0"], "--max-pending"),
                          (["--session-ttl", "59"], "--session-ttl"), (["--listen", "nonsense"], "listen")]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            p = subprocess.run([binary, "serve", "--listen", f"127.0.0.1:{port}", "--data", os.path.join(tmp, "usage"),
                                "--issuer-public-key", iss.public, *flags], capture_output=True, text=True, timeout=5,
                               stdin=subprocess.DEVNULL)
            ok(f"serve {' '.join(flags)} → exit 64, `Error: …` naming it (§11)",
               p.returncode == 64 and "Error:" in p.stderr and needle in p.stderr, f"exit {p.returncode}, stderr {p.stderr[:200]!r}")
        except subprocess.TimeoutExpired:
            ok(f"serve {' '.join(flags)} → exit 64 (§11)", False, "it started serving")


# ---------------------------------------------------------------- main

def scenario_key_ids(c):
    """protocol.md §4.7, §5.1, §8.3; envelope.md §4.1: a create names the recipient keys it was
    sealed to; keys the recipient no longer publishes are 409 stale_keys, and nothing is stored."""
    rel, kim, ken = c.relay, c.users["kim"], c.users["ken"]
    base = "/v1/users/ken/messages/"

    def key_id_of(r):                                    # envelope.md §4.1, from the verified bundle
        b = fmt.decode_bundle(r.body.decode(), "ken")
        return fmt.key_id(fmt.b64d(b["identity_key"]), fmt.b64d(b["mailbox_key"]))

    def text(mid, words):
        return fmt.b64e(kim.seal("ken", mid, kim.body("text", {"text": words})))

    expect("ken publishes his keys → 204", request(rel, "PUT", "/v1/users/ken/keys", ken.bundle(), ken.session), 204)
    old_kid = key_id_of(fetch_bundle(rel, kim, "ken"))
    ok("the key id is 22 characters of base64url (envelope.md §4.1)", fmt.is_key_id(old_kid), old_kid)
    m1 = new_id()
    env1 = text(m1, "sealed to ken's first keys")
    r = request(rel, "PUT", base + m1, {"envelope": env1, "key_id": old_kid}, kim.session)
    ok("kim sends with the key id of ken's published bundle → 201 (§4.7)",
       r.status == 201 and record_shape(r, "kim", m1, False) == "", repr(r))
    first = r.json
    # ken replaces his mailbox key (same identity) and publishes the new bundle; he keeps the old
    # secret key, as envelope.md §4.2 says, for messages already sealed to it.
    old_mailbox = ken.mailbox
    ken.mailbox = nacl.public.PrivateKey.generate()
    expect("ken publishes a bundle with a new mailbox key → 204 (§4.6)",
           request(rel, "PUT", "/v1/users/ken/keys", ken.bundle(), ken.session), 204)
    m2 = new_id()
    r = request(rel, "PUT", base + m2, {"envelope": text(m2, "sealed to the old key"), "key_id": old_kid}, kim.session)
    expect("kim sends another message sealed to the old keys, with the old key id → 409 stale_keys (§4.7)", r, 409, "stale_keys")
    expect("… and nothing was stored: ken's GET of that id → 404 (§4.7)",
           request(rel, "GET", base + m2, session=ken.session), 404, "not_found")
    r2 = request(rel, "PUT", base + m1, {"envelope": env1, "key_id": old_kid}, kim.session)
    ok("identical retry of the message stored under the old key id → 200, the stored record (§5.1)",
       r2.status == 200 and r2.json == first, f"{r2!r} vs {first}")
    expect("identical retry without key_id → 200 (§5.1)", request(rel, "PUT", base + m1, {"envelope": env1}, kim.session), 200)
    expect("identical retry with a malformed key_id → 400 invalid_key_id (its form is checked first, §5.1, §9)",
           request(rel, "PUT", base + m1, {"envelope": env1, "key_id": old_kid[:-1]}, kim.session), 400, "invalid_key_id")
    expect("the same id with another envelope and the old key id → 409 conflict (id taken before the keys, §9)",
           request(rel, "PUT", base + m1, {"envelope": text(m1, "other"), "key_id": old_kid}, kim.session), 409, "conflict")
    new_kid = key_id_of(fetch_bundle(rel, kim, "ken"))     # same identity key: the pin holds
    ok("after the re-fetch: a new key id (envelope.md §4.1)", fmt.is_key_id(new_kid) and new_kid != old_kid, f"{old_kid} {new_kid}")
    env2 = text(m2, "sealed again to the new key, same id")
    r = request(rel, "PUT", base + m2, {"envelope": env2, "key_id": new_kid}, kim.session)
    ok("sealed again under the same id, with the new key id → 201 (envelope.md §4.2)",
       r.status == 201 and record_shape(r, "kim", m2, False) == "", repr(r))
    # Malformed key ids (the `malformed` list of spec/vectors/key-ids.json), refused before anything else is looked at.
    for m in json.load(open(os.path.join(fmt.VECTORS, "key-ids.json")))["malformed"]:
        expect(f"key_id {m['why']} → 400 invalid_key_id (§4.7)",
               request(rel, "PUT", base + new_id(), {"envelope": rand_envelope(), "key_id": m["key_id"]}, kim.session),
               400, "invalid_key_id")
    expect("key_id a number → 400 invalid_json (§1)",
           request(rel, "PUT", base + new_id(), {"envelope": env2, "key_id": 7}, kim.session), 400, "invalid_json")
    expect("a malformed key_id and an envelope that is no size class → 400 invalid_envelope (envelope first, §9)",
           request(rel, "PUT", base + new_id(), {"envelope": fmt.b64e(os.urandom(600)), "key_id": "short"}, kim.session),
           400, "invalid_envelope")
    expect("key_id of a user who publishes no keys → 409 stale_keys (§4.7)",
           request(rel, "PUT", f"/v1/users/nobody-keys/messages/{new_id()}", {"envelope": rand_envelope(), "key_id": new_kid},
                   kim.session), 409, "stale_keys")
    m3 = new_id()
    r = request(rel, "PUT", base + m3, {"envelope": text(m3, "no key id"), "key_id": None}, kim.session)
    expect("key_id null (absent): not checked → 201 (§1, §4.7)", r, 201)
    # The socket's send frame: the same check, answered with an error frame carrying the ref.
    wk = WS(rel, "kim", kim.session)
    c.sockets.append(wk)
    wk.frame()
    m4 = new_id()
    wk.send({"type": "send", "ref": "stale", "to": "ken", "id": m4, "envelope": text(m4, "over the socket"), "key_id": old_kid})
    f = wk.of("error", ref="stale")
    ok("WS send with a stale key id → error frame stale_keys (409) with the ref (§8.3)",
       f.get("problem", {}).get("code") == "stale_keys" and f["problem"].get("status") == 409
       and f["problem"].get("title") == "stale keys", f)
    wk.send({"type": "send", "ref": "bad-kid", "to": "ken", "id": m4, "envelope": text(m4, "over the socket"), "key_id": "AAAA"})
    f = wk.of("error", ref="bad-kid")
    ok("WS send with a malformed key id → error frame invalid_key_id (400) with the ref (§8.3)",
       f.get("problem", {}).get("code") == "invalid_key_id" and f["problem"].get("status") == 400, f)
    wk.send({"type": "send", "ref": "fresh", "to": "ken", "id": m4, "envelope": text(m4, "over the socket"), "key_id": new_kid})
    f = wk.of("sent", ref="fresh")
    ok("WS send with the current key id → sent, created true (§8.3)", f.get("created") is True, f)
    # ken reads his mailbox: the message sealed before the change opens with the key he kept.
    r = request(rel, "GET", "/v1/users/ken/messages?limit=100", session=ken.session)
    got = {m["id"]: m for m in (r.json or {}).get("messages", [])}
    ok("ken's mailbox holds exactly the four stored messages (§4.9)", set(got) == {m1, m2, m3, m4}, sorted(got))
    opened = {}
    for mid, key in ((m1, old_mailbox), (m2, ken.mailbox), (m4, ken.mailbox)):
        try:
            opened[mid] = fmt.open_envelope(fmt.b64d(got[mid]["envelope"]), mid, "ken", bytes(key))[0] == "kim"
        except Exception as e:
            opened[mid] = repr(e)
    ok("ken opens the first message with his replaced mailbox key, the resent ones with the new key (envelope.md §4.2)",
       all(v is True for v in opened.values()), opened)
    try:
        fmt.open_envelope(fmt.b64d(got[m1]["envelope"]), m1, "ken", bytes(ken.mailbox))
        ok("… and not with the new key alone (envelope_cannot_decrypt)", False, "opened")
    except fmt.FormatError as e:
        ok("… and not with the new key alone (envelope_cannot_decrypt)", e.code == "envelope_cannot_decrypt", e.code)
    for mid in got:
        request(rel, "DELETE", base + mid, session=ken.session)
    wk.close()


# ---------------------------------------------------------------- ratchets with the Swift CLI (ratchet.md)

class V2User:
    """A client of spec/ratchet.md §6 built on check.py's version 2 code (PyUser, initiate, seal_v2):
    a version 2 bundle (§2), one-time prekeys stored before they are uploaded (§6.1), sessions with
    one active per contact (§6.4), pins (envelope.md §2.6), the ids it has stored (§6.2 item 7)."""

    def __init__(self, uid):
        self.uid = uid
        self.spk_id = secrets.randbelow(0xFFFFFFFF) + 1                         # 1 … 2³² − 1
        self.py = fmt.PyUser(uid, os.urandom(32), os.urandom(32), {self.spk_id: fmt.x25519_from_seed(os.urandom(32))})
        self.grant = None
        self.pins, self.mailboxes, self.signed_prekeys = {}, {}, {}   # contact uid → identity key, mailbox key, (id, prekey)
        self.active = {}                                              # contact uid → session id
        self.stored = set()                                           # message ids stored (or refused)
        self.next_prekey_id = secrets.randbelow(1 << 30) + 1

    @property
    def session(self):
        return self.grant["session"]

    @property
    def identity_key(self):
        return bytes(self.py.identity.verify_key)

    def bundle(self):
        """§2: signed over PAE("mailslot-key-bundle-v2", uid, IK, MK, created_at, u32be(id), SPK)."""
        mk, spk = self.py.mailbox[1], self.py.signed_prekeys[self.spk_id][1]
        created = fmt.fmt_time(int(time.time()))
        sig = self.py.identity.sign(fmt.pae(fmt.LABEL_BUNDLE_V2, self.uid.encode(), self.identity_key, mk, created.encode(),
                                            self.spk_id.to_bytes(4, "big"), spk)).signature
        return fmt.jdump({"version": 2, "uid": self.uid, "identity_key": fmt.b64e(self.identity_key), "mailbox_key": fmt.b64e(mk),
                          "created_at": created, "signed_prekey_id": self.spk_id, "signed_prekey": fmt.b64e(spk),
                          "signature": fmt.b64e(sig)})

    def make_prekeys(self, n):
        """§6.1 item 3: fresh ids, the secrets stored before the upload; the upload's entries."""
        out = []
        for _ in range(n):
            i, self.next_prekey_id = self.next_prekey_id, self.next_prekey_id + 1
            self.py.one_time_prekeys[i] = fmt.x25519_from_seed(os.urandom(32))
            out.append({"id": i, "key": fmt.b64e(self.py.one_time_prekeys[i][1])})
        return out

    def fetch(self, relay, peer):
        """GET the contact's bundle, verify it for that uid (§2), pin its identity key on first use
        and refuse another one later (envelope.md §2.6); the signed prekey only from a verified
        version 2 bundle. Returns the bundle."""
        r = request(relay, "GET", f"/v1/users/{peer}/keys", session=self.session)
        if r.status != 200:
            raise RuntimeError(f"GET keys of {peer}: {r!r}")
        b = fmt.decode_bundle(r.body.decode(), peer)
        ik = fmt.b64d(b["identity_key"])
        if self.pins.setdefault(peer, ik) != ik:
            raise RuntimeError(f"{peer}'s identity key changed: not re-pinned")
        self.mailboxes[peer] = fmt.b64d(b["mailbox_key"])
        if b["version"] == 2:
            self.signed_prekeys[peer] = (b["signed_prekey_id"], fmt.b64d(b["signed_prekey"]))
        return b

    def start_session(self, relay, peer):
        """§3 / §6.2 item 5: claim a one-time prekey (refusing an unusable one, §6.1 item 3), X3DH
        with the verified signed prekey, fresh ephemeral and ratchet keys. Returns (session, claimed)."""
        if peer not in self.signed_prekeys:
            self.fetch(relay, peer)
        r = request(relay, "POST", f"/v1/users/{peer}/prekeys/claim", {}, self.session)
        if r.status != 200 or not isinstance(r.json, dict) or "prekey" not in r.json:
            raise RuntimeError(f"claim of {peer}'s prekey: {r!r}")
        claimed, opk = r.json["prekey"], None
        if claimed is not None:
            try:
                key = fmt.b64d(claimed.get("key"))
                if type(claimed.get("id")) is int and 1 <= claimed["id"] <= 0xFFFFFFFF and len(key) == 32:
                    opk = (claimed["id"], key)
            except (ValueError, TypeError):
                pass
        s = fmt.initiate(self.py.identity, self.pins[peer], self.signed_prekeys[peer], opk,
                         fmt.x25519_from_seed(os.urandom(32)), fmt.x25519_from_seed(os.urandom(32)))
        self.py.sessions[s.id] = s
        self.active[peer] = s.id
        return s, claimed

    def text(self, words):
        return fmt.jdump({"timestamp": int(time.time() * 1000), "type": "text",
                          "sender": {"id": self.uid, "name": self.uid.capitalize()}, "payload": {"text": words}})

    def seal(self, peer, mid, words, session=None):
        """§5.2 in the active session with `peer` (§6.4 item 10), or in `session`, sealed to its
        verified mailbox key."""
        s = session or self.py.sessions[self.active[peer]]
        return fmt.seal_v2(self.text(words), mid, self.uid, self.py.identity, peer, self.mailboxes[peer], s,
                           lambda padded: fmt.seal_record(None, self.mailboxes[peer], padded))

    def accept(self, relay, record):
        """A delivered record: a stored id is only acknowledged (§6.2 item 7, before decryption);
        otherwise the clear fields are read, the sender checked against the author the relay
        stamped and the pinned key (§5.3, the caller's checks; pinned now from a verified bundle
        on first use), then it opens (§5.3 checks 16–24), which erases a one-time prekey used and
        keeps the new state; a session the contact started becomes active (§6.4 item 11).
        Returns None for a duplicate, else (fields, body, message)."""
        if record["id"] in self.stored:
            return None
        env = fmt.b64d(record["envelope"])
        if record.get("size") != len(env):
            raise RuntimeError(f"size {record.get('size')} != {len(env)}")
        fields = fmt.read_v2(env, record["id"], self.uid, self.py.mailbox[0])
        if fields["sender"] != record["author"]:
            raise RuntimeError(f"record's sender {fields['sender']} != relay-stamped author {record['author']}")
        if fields["sender"] not in self.pins:
            self.fetch(relay, fields["sender"])
        if self.pins[fields["sender"]] != fields["skey"]:
            raise RuntimeError("sender identity key differs from the pinned one")
        new = fields["sid"] not in self.py.sessions
        sender, _, body = self.py.open(env, record["id"], int(time.time()), lambda: fmt.x25519_from_seed(os.urandom(32)))
        self.stored.add(record["id"])
        if new:
            cur = self.py.sessions.get(self.active.get(sender))
            if cur is None or cur.start is None or not cur.initiated or fields["sid"] < cur.id:
                self.active[sender] = fields["sid"]
        return fields, body, fmt.jload(body)


class Cli:
    """The Swift `mailslot` CLI with a profile in its own MAILSLOT_HOME; every call bounded."""

    def __init__(self, binary, home):
        self.binary, self.home = binary, home

    def run(self, *args, stdin=None):
        env = {"MAILSLOT_HOME": self.home, "HOME": self.home, "PATH": "/usr/bin:/bin"}
        try:
            p = subprocess.run([self.binary, *args], env=env, input=stdin, capture_output=True, text=True, timeout=6 * TIMEOUT)
        except subprocess.TimeoutExpired:
            return 124, [], f"timed out after {6 * TIMEOUT:.0f} s"
        lines = []
        for line in p.stdout.splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"unparsed": line})
        return p.returncode, lines, p.stderr.strip()


def scenario_sessions_with_swift(c):
    """spec/ratchet.md between check.py's version 2 (pyuser, pyuser2, clients as §6 says) and the
    Swift CLI (swuser), through this relay. Which session and which record kind is read from the
    clear fields (§5.1) Python sees when opening; what the CLI shows is its `--json` output."""
    rel = c.relay
    if not os.access(c.cli_binary, os.X_OK):
        return ok("the mailslot CLI binary is present", False, c.cli_binary)
    cli = Cli(c.cli_binary, os.path.join(c.tmp, "mailslot-home"))
    py, py2 = V2User("pyuser"), V2User("pyuser2")
    # The owner's view of swuser's prekeys and mailbox: a second session of swuser, signed in with a
    # token from the same issuer (the relay sees only the uid; the CLI's own session is untouched).
    owner = User("swuser")

    def sw_count():
        r = request(rel, "GET", "/v1/users/swuser/prekeys", session=owner.session)
        return r.json.get("count") if r.status == 200 and isinstance(r.json, dict) else repr(r)

    def py_count(u):
        r = request(rel, "GET", f"/v1/users/{u.uid}/prekeys", session=u.session)
        return r.json.get("count") if r.status == 200 and isinstance(r.json, dict) else repr(r)

    def put(u, to, mid, env):
        return request(rel, "PUT", f"/v1/users/{to}/messages/{mid}", {"envelope": fmt.b64e(env)}, u.session)

    def cli_send(words, to):
        rc, lines, err = cli.run("send", "--profile", "swuser", "--json", to, words)
        good = rc == 0 and len(lines) == 1 and lines[0].get("state") == "sent" and lines[0].get("to") == to
        ok(f"CLI `send {to} {words!r}` → exit 0, state sent", good, f"exit {rc}, {lines}, stderr {err!r}")
        return lines[0].get("id") if good else None

    def cli_receive(name):
        rc, lines, err = cli.run("receive", "--profile", "swuser", "--json")
        ok(f"CLI `receive --json` ({name}) → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
        return lines

    def clear(f):
        """The clear fields that say which session and where in it (§5.1), readable in a FAIL line."""
        return {"session": f["sid"].hex(), "kind": 0 if f["start"] is None else 1, "pn_n": f["header"][1:],
                "start": f["start"] and (fmt.b64e(f["start"][0]), *f["start"][1:])}

    def shown(lines):
        return [(m.get("id"), m.get("from"), m.get("type"), m.get("text")) for m in lines]

    def receive_one(u, mid):
        """u's mailbox over HTTP (protocol.md §4.9) holds exactly `mid` (one message of any id when
        None): opened, then acked (§4.11)."""
        r = request(rel, "GET", f"/v1/users/{u.uid}/messages", session=u.session)
        recs = r.json.get("messages", []) if r.status == 200 else []
        if len(recs) != 1 or mid not in (None, recs[0]["id"]):
            raise RuntimeError(f"{u.uid}'s mailbox, expected only {mid or 'one message'}: {r!r}")
        mid = recs[0]["id"]
        fields, _, msg = u.accept(rel, recs[0])
        expect(f"{u.uid} acks {mid[:8]}… → 204 (protocol.md §4.11)",
               request(rel, "DELETE", f"/v1/users/{u.uid}/messages/{mid}", session=u.session), 204)
        return fields, msg

    # 1. The CLI logs in: a version 2 bundle and 100 one-time prekeys (§6.1 items 1, 3).
    rc, lines, err = cli.run("login", "--profile", "swuser", "--relay", f"http://127.0.0.1:{rel.port}", "--token", "-", "--json",
                             stdin=c.issuer.token("swuser") + "\n")
    ok("CLI `login --token -` with a token from this issuer → exit 0, uid swuser", rc == 0 and lines and lines[0].get("uid") == "swuser",
       f"exit {rc}, {lines}, stderr {err!r}")
    if rc != 0:
        return
    for u in (py, py2, owner):
        u.grant = sign_in(rel, c.issuer, u)
    b = py.fetch(rel, "swuser")
    ok("the CLI published a version 2 bundle that verifies for swuser, signed prekey id 1 … 2³² − 1 (ratchet.md §2, §6.1 item 1)",
       b["version"] == 2 and 1 <= b["signed_prekey_id"] <= 0xFFFFFFFF, b)
    ok("its identity key is the one the CLI's login printed the fingerprint of (envelope.md §5)",
       fmt.fingerprint("swuser", py.pins["swuser"]) == lines[0].get("fingerprint", "").replace(" ", ""), lines[0])
    ok("the CLI uploaded 100 one-time prekeys: the owner's GET …/prekeys → count 100 (ratchet.md §6.1 item 3, protocol.md §4.14)",
       sw_count() == 100, sw_count())

    # 2. Python publishes a version 2 bundle and one-time prekeys; the CLI starts a session.
    for u in (py, py2):
        expect(f"{u.uid} PUTs a version 2 bundle → 204 (protocol.md §4.6, ratchet.md §2)",
               request(rel, "PUT", f"/v1/users/{u.uid}/keys", u.bundle(), u.session), 204)
        r = request(rel, "POST", f"/v1/users/{u.uid}/prekeys", {"prekeys": u.make_prekeys(10)}, u.session)
        ok(f"{u.uid} uploads 10 one-time prekeys, secrets stored first → 200 {{\"count\":10}} (protocol.md §4.14)",
           r.status == 200 and r.json == {"count": 10}, repr(r))
    before = dict(py.py.one_time_prekeys)
    words = ["one from swift", "two from swift", "three from swift"]
    ids = [cli_send(w, "pyuser") for w in words]
    if None in ids:
        return
    ok("the CLI claimed exactly one of pyuser's one-time prekeys: count 10 → 9 (ratchet.md §6.2 item 5)",
       py_count(py) == 9, py_count(py))
    w = WS(rel, "pyuser", py.session)
    c.sockets.append(w)
    f = w.frame()
    ok("pyuser subscribes: ready {pending 3, prekeys 9} (protocol.md §8.4)", f == {"type": "ready", "pending": 3, "prekeys": 9}, f)
    got = [w.of("message")["message"] for _ in ids]
    ok("the three arrive in the order sent, by id", [d["id"] for d in got] == ids, [d["id"] for d in got])
    opened = []
    for d, words_i in zip(got, words):
        try:
            rec = fmt.outer_open(fmt.b64d(d["envelope"]), py.py.mailbox[0])
            ok(f"{d['id'][:8]}… is a version 2 record (0x02): the CLI seals v2 to a v2 bundle (ratchet.md §6.3 item 8)",
               rec[0] == 2, rec[:1].hex())
            fields, body, msg = py.accept(rel, d)
            opened.append(fields)
            ok(f"pyuser opens {d['id'][:8]}… as version 2 (§5.3): author = sender swuser, the pinned key, text {words_i!r}",
               fields["sender"] == "swuser" and fields["skey"] == py.pins["swuser"] and msg["payload"].get("text") == words_i
               and msg["type"] == "text", msg)
        except Exception as e:
            ok(f"pyuser opens {d['id'][:8]}… as version 2 (§5.3)", False, f"{type(e).__name__}: {e}")
    if len(opened) == 3:
        starts = [o["start"] for o in opened]
        ok("all three are session starts (kind 1) of one session, N = 0, 1, 2: the initiator writes the start until answered (§5.1)",
           all(s is not None for s in starts) and len({o["sid"] for o in opened}) == 1 and len(set(starts)) == 1
           and [o["header"][2] for o in opened] == [0, 1, 2], [clear(o) for o in opened])
        spk_id, opk_id = starts[0][1], starts[0][2]
        ok("the start names pyuser's signed prekey and a one-time prekey pyuser uploaded (§3, §5.1)",
           spk_id == py.spk_id and opk_id in before, (spk_id, opk_id))
        ok("the session id is BLAKE2b-128(PAE(label, IK_swuser, IK_pyuser, EK)) (§3)",
           opened[0]["sid"] == fmt.session_id(py.pins["swuser"], py.identity_key, starts[0][0]), opened[0]["sid"].hex())
        ok("pyuser erased that one-time prekey's secret with the first message (§5.3, §6.1 item 4); the other 9 kept",
           opk_id not in py.py.one_time_prekeys and len(py.py.one_time_prekeys) == 9, sorted(py.py.one_time_prekeys))
        ok("the session the CLI started is pyuser's active one with swuser (§6.4 item 11)", py.active.get("swuser") == opened[0]["sid"], "")
    for d in got:
        w.send({"type": "ack", "id": d["id"]})
        ok(f"pyuser acks {d['id'][:8]}… → acked (protocol.md §8.3)", w.of("acked", id=d["id"]) == {"type": "acked", "id": d["id"]}, "")
    c.erased += [(f"v2 from the CLI {d['id'][:8]}", fmt.b64d(d["envelope"])) for d in got]
    w.close()
    r = request(rel, "GET", "/v1/users/pyuser/messages", session=py.session)
    ok("pyuser's mailbox is empty", r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    if len(opened) != 3:
        return

    # 3. Python answers in that session: the ratchet turns; the CLI shows both.
    replies = [(new_id(), "first reply from python"), (new_id(), "second reply from python")]
    captured = {}
    for mid, text in replies:
        env = py.seal("swuser", mid, text)
        captured[mid] = env
        expect(f"pyuser PUTs {text!r} in the session → 201", put(py, "swuser", mid, env), 201)
    s = py.py.sessions[opened[0]["sid"]]
    ok("pyuser's replies are kind 0 with a new ratchet key (its DH step, §4.4 step 3; the responder writes kind 0, §5.1)",
       s.start is None and s.ratchet.own[1] != py.py.signed_prekeys[py.spk_id][1] and s.ratchet.ns == 2, "")
    lines = cli_receive("pyuser's replies")
    ok("the CLI shows both replies, from pyuser, in order (ratchet.md §5.3 on the Swift side)",
       shown(lines) == [(mid, "pyuser", "text", text) for mid, text in replies], lines)
    rc, sn, err = cli.run("fingerprint", "--profile", "swuser", "--json", "pyuser")
    want = fmt.safety_number(fmt.fingerprint("swuser", py.pins["swuser"]), fmt.fingerprint("pyuser", py.identity_key))
    ok("the CLI pinned pyuser's identity key: its safety number is Python's (envelope.md §5)",
       rc == 0 and sn and sn[0].get("safety_number") == want, f"exit {rc}, {sn}, stderr {err!r}; expected {want}")
    mid4 = cli_send("four, after your reply", "pyuser")
    try:
        fields, msg = receive_one(py, mid4)
        ok("the CLI's next message is kind 0 in the same session, N = 0 of a new chain: the start is answered (§5.1, §4.4)",
           fields["start"] is None and fields["sid"] == opened[0]["sid"] and fields["header"][1:] == (3, 0)
           and fields["header"][0] != opened[0]["header"][0] and msg["payload"].get("text") == "four, after your reply",
           clear(fields))
    except Exception as e:
        ok("pyuser opens the CLI's answer in the session (§5.3)", False, f"{type(e).__name__}: {e}")

    # 4. The other way: pyuser2 starts a session with swuser's one-time prekey.
    n0 = sw_count()
    try:
        s2, claimed = py2.start_session(rel, "swuser")
    except Exception as e:
        return ok("pyuser2 starts a session with swuser (§3)", False, f"{type(e).__name__}: {e}")
    ok("pyuser2 verifies swuser's bundle and claims a usable one-time prekey (§6.1 item 3, protocol.md §4.14)",
       isinstance(claimed, dict) and s2.start[2] == claimed.get("id") and s2.start[1] == b["signed_prekey_id"], claimed)
    ok("the claim took exactly one of swuser's prekeys: count − 1 (protocol.md §4.14)", sw_count() == n0 - 1, (n0, sw_count()))
    m21, m22 = new_id(), new_id()
    for mid, text in ((m21, "hello swift, from python"), (m22, "and a second one")):
        env = py2.seal("swuser", mid, text)
        expect(f"pyuser2 PUTs {text!r} (kind 1: the session start) → 201", put(py2, "swuser", mid, env), 201)
    lines = cli_receive("pyuser2's session start")
    ok("the CLI accepts pyuser2's session (X3DH as the responder, with its one-time prekey) and shows both (§5.3 checks 17–19)",
       shown(lines) == [(m21, "pyuser2", "text", "hello swift, from python"), (m22, "pyuser2", "text", "and a second one")], lines)
    ok("the CLI did not replace its prekeys while 25 or more were left (§6.1 item 3): count unchanged", sw_count() == n0 - 1, sw_count())
    mid5 = cli_send("swift answers pyuser2", "pyuser2")
    try:
        fields, msg = receive_one(py2, mid5)
        ok("the CLI answers in pyuser2's session (its active one, §6.4 item 11): same session id, kind 0, N = 0",
           fields["sid"] == s2.id and fields["start"] is None and fields["header"][1:] == (0, 0), clear(fields))
        ok("pyuser2 opens the answer in its session (§5.3): from swuser, the text", fields["sender"] == "swuser"
           and msg["payload"].get("text") == "swift answers pyuser2", msg)
        ok("pyuser2's start is answered: it would write kind 0 from now on (§5.1)", py2.py.sessions[s2.id].start is None, "")
        ok("pyuser2's own one-time prekeys are untouched: the CLI did not start a second session (count 10)",
           py_count(py2) == 10, py_count(py2))
    except Exception as e:
        ok("pyuser2 opens the CLI's answer in its session (§5.3)", False, f"{type(e).__name__}: {e}")

    # 4b. A session start naming the one-time prekey the CLI has used: its secret is gone (§6.1
    # item 4), the start cannot be read (§5.3 check 17), the CLI says so with an `unreadable`
    # receipt in its active session with pyuser2; pyuser2 drops that session and sends the message
    # again, under its id, in a new one (§6.4 item 13), which the CLI then makes its active one.
    spent = fmt.initiate(py2.py.identity, py2.pins["swuser"], py2.signed_prekeys["swuser"], (claimed["id"], fmt.b64d(claimed["key"])),
                         fmt.x25519_from_seed(os.urandom(32)), fmt.x25519_from_seed(os.urandom(32)))
    m6, words6 = new_id(), "sent again in a new session"
    expect("pyuser2 creates a session start naming swuser's spent one-time prekey → 201",
           put(py2, "swuser", m6, py2.seal("swuser", m6, words6, session=spent)), 201)
    lines = cli_receive("a start with a spent prekey")
    ok("the CLI does not show it: the prekey's secret was erased with the first message (§6.1 item 4, §5.3 check 17)", lines == [], lines)
    try:
        fields, msg = receive_one(py2, None)
        ok("pyuser2 gets an `unreadable` receipt naming it, from swuser, in the CLI's active session with it, kind 0 (§6.4 item 13)",
           msg["type"] == "receipt" and msg["payload"].get("receipt") == {"kind": "unreadable", "message_ids": [m6]}
           and fields["sid"] == s2.id and fields["start"] is None, (msg, clear(fields)))
    except Exception as e:
        ok("pyuser2 receives the CLI's `unreadable` receipt (§6.4 item 13)", False, f"{type(e).__name__}: {e}")
    del py2.py.sessions[py2.active.pop("swuser")]
    try:
        s4, _ = py2.start_session(rel, "swuser")
        expect("pyuser2 drops its active session and sends the message again, same id, in a new session (§6.4 item 13) → 201",
               put(py2, "swuser", m6, py2.seal("swuser", m6, words6)), 201)
    except Exception as e:
        ok("pyuser2 starts a new session with swuser (§3)", False, f"{type(e).__name__}: {e}")
        s4 = None
    lines = cli_receive("the message again, in a new session")
    ok("the CLI shows it now: a rejection for an unreadable code does not make its id a duplicate (§6.4 item 13)",
       shown(lines) == [(m6, "pyuser2", "text", words6)], lines)
    mid7 = cli_send("swift answers in the new session", "pyuser2")
    try:
        fields, msg = receive_one(py2, mid7)
        ok("the CLI answers in pyuser2's new session, now its active one (§6.4 item 11), kind 0",
           s4 is not None and fields["sid"] == s4.id and fields["start"] is None
           and msg["payload"].get("text") == "swift answers in the new session", clear(fields))
    except Exception as e:
        ok("pyuser2 opens the CLI's answer in the new session (§5.3)", False, f"{type(e).__name__}: {e}")

    # 5. Out of order, then replays.
    oo = [(new_id(), "out of order: sent first"), (new_id(), "out of order: sent second")]
    envs = {mid: py.seal("swuser", mid, text) for mid, text in oo}
    for n, (mid, _) in reversed(list(enumerate(oo))):
        expect(f"pyuser creates its message N = {n} of the chain first → 201", put(py, "swuser", mid, envs[mid]), 201)
    lines = cli_receive("two in reverse order")
    ok("the CLI shows both, the later one first as the relay delivered them: a skipped key kept and used (§4.4)",
       shown(lines) == [(mid, "pyuser", "text", text) for mid, text in reversed(oo)], lines)
    replay_id, replay_env = replies[0][0], captured[replies[0][0]]
    r = request(rel, "GET", f"/v1/users/swuser/messages/{replay_id}", session=owner.session)
    expect("the captured reply was acked by the CLI and erased: GET as the owner → 404 (protocol.md §4.8)", r, 404, "not_found")
    expect("pyuser creates the captured envelope again under its id → 201 (the relay holds no trace of it, §6)",
           put(py, "swuser", replay_id, replay_env), 201)
    other_id = new_id()
    expect("… and under a new id → 201", put(py, "swuser", other_id, replay_env), 201)
    # §6.3 item 9: version 1 from pyuser, who has written in sessions, is a downgrade; from a contact
    # who never has (pyv1, a version 1 bundle), the same kind of envelope still opens.
    v1_id, ctl_id, pyv1 = new_id(), new_id(), User("pyv1")
    expect("pyuser creates a version 1 envelope (envelope.md §2) after its version 2 ones → 201",
           put(py, "swuser", v1_id, fmt.seal(py.text("a downgrade"), v1_id, "pyuser", py.py.identity, "swuser", py.mailboxes["swuser"])), 201)
    pyv1.grant = sign_in(rel, c.issuer, pyv1)
    request(rel, "PUT", "/v1/users/pyv1/keys", pyv1.bundle(), pyv1.session)
    fetch_bundle(rel, pyv1, "swuser")
    expect("control: pyv1 (version 1 bundle, never in a session) creates a version 1 text → 201",
           put(pyv1, "swuser", ctl_id, pyv1.seal("swuser", ctl_id, pyv1.body("text", {"text": "version 1 still opens"}))), 201)
    lines = cli_receive("replays, a downgrade, a version 1 control")
    ok("the CLI shows only pyv1's version 1 text: neither replay (a stored id is recognised before decryption, §6.2 item 7; "
       "another id is refused, §5.3 check 15) nor pyuser's version 1 (envelope_downgrade, §6.3 item 9)",
       shown(lines) == [(ctl_id, "pyv1", "text", "version 1 still opens")], lines)
    r = request(rel, "GET", "/v1/users/swuser/messages", session=owner.session)
    ok("the CLI acknowledged all four: swuser's mailbox ends empty (§6.2 item 7, §6.3 item 9)",
       r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    r = request(rel, "GET", "/v1/users/pyuser/messages", session=py.session)
    ok("no `unreadable` receipt came back to pyuser for them (§6.4 item 13: only for messages that cannot be read)",
       r.status == 200 and r.json == {"messages": [], "next": None}, repr(r))
    rc, hist, err = cli.run("history", "--profile", "swuser", "--json", "pyuser")
    received = [h.get("id") for h in hist if h.get("from") == "pyuser"]
    ok("the CLI's history holds each of pyuser's messages once",
       rc == 0 and sorted(received) == sorted([m for m, _ in replies] + [m for m, _ in oo]), f"exit {rc}, {received}, stderr {err!r}")
    c.erased += [(f"v2 replay {replay_id[:8]}", replay_env)]


# ---------------------------------------------------------------- blobs (protocol.md §4.15–§4.21, attachments.md)



def blob_id():
    return secrets.token_urlsafe(16)              # 22 characters, 16 random bytes (protocol.md §4.15)


def part_digest(data):
    """Mailslot-Digest: BLAKE2b-256 of the part, unpadded base64url (§4.17)."""
    return fmt.b64e(hashlib.blake2b(data, digest_size=32).digest())


def seal_file_push(plain):
    """attachments.md §1.2 as a sealer does it: a fresh key, init_push draws the header; the
    digest of §1.3. Returns (key, ciphertext, digest)."""
    key = nacl.bindings.crypto_secretstream_xchacha20poly1305_keygen()
    st = nacl.bindings.crypto_secretstream_xchacha20poly1305_state()
    header = nacl.bindings.crypto_secretstream_xchacha20poly1305_init_push(st, key)
    padded = plain + bytes(fmt.file_padded_size(len(plain)) - len(plain))
    n = len(padded) // fmt.CHUNK
    out = [header]
    for i in range(n):
        out.append(nacl.bindings.crypto_secretstream_xchacha20poly1305_push(
            st, padded[i * fmt.CHUNK:(i + 1) * fmt.CHUNK], fmt.file_ad(len(plain)),
            fmt.TAG_FINAL if i == n - 1 else fmt.TAG_MESSAGE))
    ct = b"".join(out)
    return key, ct, hashlib.blake2b(ct, digest_size=32).digest()


def put_part(rel, session, bid, n, data, digest=None, ctype="application/octet-stream", headers=None):
    h = {"Mailslot-Digest": digest if digest is not None else part_digest(data)}
    h.update(headers or {})
    return request(rel, "PUT", f"/v1/blobs/{bid}/parts/{n}", data, session, headers=h, ctype=ctype, timeout=30)


def same_answer(a, b):
    """The same to a client: status, body and every header but Date (§2: a non-party's answer is
    exactly a missing blob's)."""
    ha = {k: v for k, v in a.headers.items() if k != "date"}
    hb = {k: v for k, v in b.headers.items() if k != "date"}
    return a.status == b.status and a.body == b.body and ha == hb


def blob_record_shape(j, bid, author, size, state, author_view):
    """BlobRecord (§4.15): '' when fine."""
    if not isinstance(j, dict):
        return "not an object"
    p = []
    if j.get("id") != bid or j.get("author") != author or j.get("size") != size or j.get("state") != state:
        p.append(f"id/author/size/state {j.get('id')} {j.get('author')} {j.get('size')} {j.get('state')}")
    ps, parts = j.get("part_size"), j.get("parts")
    if not (type(ps) is int and ps > 0 and type(parts) is int and parts == -(-size // ps)):
        p.append(f"part_size {ps}, parts {parts}")
    if relay_time(j.get("created_at")) is None:
        p.append("created_at")
    want, other = ("upload_expires_at", "expires_at") if state == "uploading" else ("expires_at", "upload_expires_at")
    if relay_time(j.get(want)) is None or other in j:
        p.append(f"{want} missing or {other} present")
    if author_view:
        if "recipients" not in j or (state == "uploading") != ("received" in j):
            p.append("author view without recipients, or received out of place")
    elif "recipients" in j or "received" in j:
        p.append("a recipient sees recipients or received")
    p += [f"{k} is null" for k, v in j.items() if v is None]
    return "; ".join(p)


def openapi_validator(name):
    """spec/openapi.yaml's schema `name` (JSON Schema 2020-12), as a validating client reads it."""
    import jsonschema, yaml
    spec = yaml.safe_load(open(os.path.join(fmt.ROOT, "spec", "openapi.yaml"), encoding="utf-8"))
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})


def schema_errors(name, value):
    return "; ".join(e.message for e in openapi_validator(name).iter_errors(value))[:300]


def blob_files(c):
    """Regular files under the relay's blob folder (the default file store, §7.4)."""
    root = os.path.join(c.relay.data, "blobs")
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def scenario_blobs(c):
    """A file sealed here (attachments.md §1), uploaded in parts with one wrong digest first,
    referenced in a sealed chat message, downloaded by its recipient with ranges across a part
    boundary, opened (§2), acknowledged, and erased: the blob rules black-box on the way."""
    rel, a, b, carol = c.relay, c.users["alice"], c.users["bob"], c.users["carol"]
    for u in (a, b, carol):                      # earlier scenarios may have ended their sessions
        u.grant = sign_in(rel, c.issuer, u)
    plain = os.urandom(2_500_000)
    key, ct, digest = seal_file_push(plain)
    size = len(ct)
    ok("a Python-sealed file has the size of §1.1 and opens with check.py's opener",
       size == fmt.file_size(len(plain)) and fmt.file_valid_size(size) and fmt.open_file(ct, key, digest, size, len(plain)) == plain, "")
    bid = blob_id()
    create = {"id": bid, "size": size, "recipients": [b.uid]}
    r = request(rel, "POST", "/v1/blobs", create, a.session)
    ok("POST /v1/blobs → 201, a BlobRecord in the author's view, uploading, no part (§4.15)",
       r.status == 201 and not blob_record_shape(r.json, bid, a.uid, size, "uploading", True)
       and r.json.get("received") == [] and r.json.get("recipients") == [b.uid] and r.json.get("part_size") == BLOB_PART,
       f"{r!r} {blob_record_shape(r.json, bid, a.uid, size, 'uploading', True)}")
    parts = r.json["parts"] if r.status == 201 else -(-size // BLOB_PART)
    ok("a 2.5 MB file is 3 parts of 1 MiB (the relay's --blob-part-bytes)", parts == 3, f"{parts}")
    ok("openapi.yaml: the create body matches BlobCreateRequest, the answer BlobRecord",
       not schema_errors("BlobCreateRequest", create) and not schema_errors("BlobRecord", r.json),
       schema_errors("BlobCreateRequest", create) + schema_errors("BlobRecord", r.json))
    ok("openapi.yaml: BlobCreateRequest refuses a size below the smallest file's and no recipients",
       schema_errors("BlobCreateRequest", {"id": bid, "size": 65576, "recipients": [b.uid]}) != ""
       and schema_errors("BlobCreateRequest", {"id": bid, "size": size, "recipients": []}) != "", "matched")
    again = request(rel, "POST", "/v1/blobs", {"id": bid, "size": size, "recipients": [b.uid]}, a.session)
    ok("the same create again → 200, the same record (§4.15)", again.status == 200 and again.json == r.json, repr(again))
    expect("the same id by another author → 409 conflict", request(rel, "POST", "/v1/blobs", create, carol.session), 409, "conflict")
    expect("a size no file has → 400 invalid_blob_size",
           request(rel, "POST", "/v1/blobs", {"id": blob_id(), "size": size + 1, "recipients": [b.uid]}, a.session), 400, "invalid_blob_size")
    expect("a blob over the largest file → 413 blob_too_large",
           request(rel, "POST", "/v1/blobs", {"id": blob_id(), "size": fmt.file_size(1 << 40), "recipients": [b.uid]}, a.session),
           413, "blob_too_large")
    expect("recipients repeated → 400 invalid_recipients",
           request(rel, "POST", "/v1/blobs", {"id": blob_id(), "size": size, "recipients": [b.uid, b.uid]}, a.session), 400, "invalid_recipients")
    expect("a blob id of 15 characters → 400 invalid_blob_id",
           request(rel, "POST", "/v1/blobs", {"id": "abcdefghijklmno", "size": size, "recipients": [b.uid]}, a.session), 400, "invalid_blob_id")

    def part(n):
        return ct[(n - 1) * BLOB_PART:min(n * BLOB_PART, size)]

    def received():
        return request(rel, "GET", f"/v1/blobs/{bid}", session=a.session).json.get("received")

    wrong = bytearray(part(2))
    wrong[7] ^= 1
    expect("part 2 whose bytes do not match its Mailslot-Digest → 400 part_digest_mismatch (§4.17)",
           put_part(rel, a.session, bid, 2, bytes(wrong), digest=part_digest(part(2))), 400, "part_digest_mismatch")
    ok("… and nothing is recorded", received() == [], f"{received()}")
    expect("a part without Mailslot-Digest → 400 invalid_digest",
           request(rel, "PUT", f"/v1/blobs/{bid}/parts/1", part(1), a.session, ctype="application/octet-stream"), 400, "invalid_digest")
    expect("a part as application/json → 415 unsupported_media_type",
           put_part(rel, a.session, bid, 1, part(1), ctype="application/json"), 415, "unsupported_media_type")
    expect("part 4 of 3 → 400 invalid_part", put_part(rel, a.session, bid, 4, part(3)), 400, "invalid_part")
    expect("part 1 one byte short → 400 invalid_part_length", put_part(rel, a.session, bid, 1, part(1)[:-1]), 400, "invalid_part_length")
    expect("the recipient uploading a part → 403 forbidden (§2)", put_part(rel, b.session, bid, 1, part(1)), 403, "forbidden")
    expect("download while uploading → 409 blob_incomplete (§4.18)",
           request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session), 409, "blob_incomplete")
    r2 = put_part(rel, a.session, bid, 2, part(2))
    ok("part 2 with its digest → 200, recorded", r2.status == 200 and r2.json.get("received") == [2], repr(r2))
    ok("part 2 again, the same bytes → 200, nothing changes (idempotent)",
       put_part(rel, a.session, bid, 2, part(2)).status == 200 and received() == [2], "")
    expect("part 2 again with other bytes → 409 part_conflict",
           put_part(rel, a.session, bid, 2, os.urandom(len(part(2)))), 409, "part_conflict")
    r3 = put_part(rel, a.session, bid, 3, part(3))
    r1 = put_part(rel, a.session, bid, 1, part(1))
    ok("openapi.yaml: a complete blob's record matches BlobRecord", not schema_errors("BlobRecord", r1.json),
       schema_errors("BlobRecord", r1.json))
    ok("parts in any order; the last one completes the blob (§4.17)",
       r3.status == 200 and r1.status == 200 and not blob_record_shape(r1.json, bid, a.uid, size, "complete", True),
       f"{r3!r} {r1!r} {blob_record_shape(r1.json, bid, a.uid, size, 'complete', True)}")

    # the blob rules, black-box (§2): carol is no party; her every answer is a random id's
    rnd = blob_id()
    for label, method, suffix in [("GET", "GET", ""), ("GET content", "GET", "/content"), ("POST ack", "POST", "/ack"), ("DELETE", "DELETE", "")]:
        x = request(rel, method, f"/v1/blobs/{bid}{suffix}", session=carol.session)
        y = request(rel, method, f"/v1/blobs/{rnd}{suffix}", session=carol.session)
        ok(f"a non-party's {label} is answered exactly as a random id's: 404 not_found (§2)",
           is_problem(x, 404, "not_found") and same_answer(x, y), f"{x!r} vs {y!r}")
    x = put_part(rel, carol.session, bid, 1, part(1))
    y = put_part(rel, carol.session, rnd, 1, part(1))
    ok("a non-party's part upload is answered exactly as a random id's", is_problem(x, 404, "not_found") and same_answer(x, y), f"{x!r} vs {y!r}")
    expect("no session → 401", request(rel, "GET", f"/v1/blobs/{bid}"), 401, "unauthenticated")
    expect("the recipient deleting → 403 forbidden", request(rel, "DELETE", f"/v1/blobs/{bid}", session=b.session), 403, "forbidden")
    expect("the author acknowledging (not a recipient) → 404 (§4.19)",
           request(rel, "POST", f"/v1/blobs/{bid}/ack", session=a.session), 404, "not_found")
    expect("another uid's blob list → 403 forbidden (§4.21)",
           request(rel, "GET", f"/v1/users/{b.uid}/blobs?role=recipient", session=carol.session), 403, "forbidden")
    lst = request(rel, "GET", f"/v1/users/{b.uid}/blobs?role=recipient", session=b.session)
    ok("the recipient's list names the blob, in a recipient's view, next null (§4.21)",
       lst.status == 200 and lst.json.get("next") is None and [x.get("id") for x in lst.json.get("blobs", [])] == [bid]
       and not blob_record_shape(lst.json["blobs"][0], bid, a.uid, size, "complete", False), repr(lst))
    ok("openapi.yaml: the page matches BlobPage, a problem Problem", not schema_errors("BlobPage", lst.json)
       and not schema_errors("Problem", request(rel, "GET", f"/v1/blobs/{rnd}", session=carol.session).json),
       schema_errors("BlobPage", lst.json))
    expect("role=owner → 400 bad_request", request(rel, "GET", f"/v1/users/{b.uid}/blobs?role=owner", session=b.session), 400, "bad_request")

    # the reference travels in a sealed chat message (attachments.md §3), version 1 envelope
    fetch_bundle(rel, a, b.uid)
    ref = {"blob": bid, "key": fmt.b64e(key), "digest": fmt.b64e(digest), "size": size, "plain_size": len(plain),
           "media_type": "application/octet-stream", "name": "interop.bin"}
    mid = new_id()
    body = a.body("file", {"files": [ref], "text": "a file"})
    env = a.seal(b.uid, mid, body)
    expect("the chat message with the reference → 201", request(rel, "PUT", f"/v1/users/{b.uid}/messages/{mid}",
                                                                 {"envelope": fmt.b64e(env)}, a.session), 201)
    got = request(rel, "GET", f"/v1/users/{b.uid}/messages/{mid}", session=b.session)
    fetch_bundle(rel, b, a.uid)
    _, _, msg = accept(b, got.json)
    files = msg.get("payload", {}).get("files") or [{}]
    r0 = files[0]
    ok("bob opens the message: type file, the reference as sent", msg.get("type") == "file" and r0 == ref, f"{msg}")
    request(rel, "DELETE", f"/v1/users/{b.uid}/messages/{mid}", session=b.session)

    # bob downloads: a range across the boundary of parts 1 and 2, then the rest resumed
    lo, hi = BLOB_PART - 100, BLOB_PART + 99
    g = request(rel, "GET", f"/v1/blobs/{r0['blob']}/content", session=b.session, headers={"Range": f"bytes={lo}-{hi}"})
    ok("Range across a part boundary → 206, Content-Range, the bytes (§4.18)",
       g.status == 206 and g.body == ct[lo:hi + 1] and g.headers.get("content-range") == f"bytes {lo}-{hi}/{size}"
       and g.headers.get("content-type") == "application/octet-stream", f"{g.status} {g.headers} {len(g.body)}")
    have = request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session, headers={"Range": f"bytes=0-{hi}"}).body
    rest = request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session, headers={"Range": f"bytes={len(have)}-"})
    whole = have + rest.body
    ok("a download resumed with bytes=N- gives the rest (206)", rest.status == 206 and whole == ct, f"{rest.status} {len(whole)}")
    full = request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session, timeout=30)
    ok("without Range → 200, the whole blob, Accept-Ranges and Cache-Control: no-store",
       full.status == 200 and full.body == ct and full.headers.get("accept-ranges") == "bytes"
       and full.headers.get("cache-control") == "no-store", f"{full.status} {full.headers}")
    for rng in (f"bytes={size}-", "bytes=0-1,5-9"):
        u = request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session, headers={"Range": rng})
        ok(f"Range {rng} → 416 invalid_range, Content-Range: bytes */size", is_problem(u, 416, "invalid_range")
           and u.headers.get("content-range") == f"bytes */{size}", repr(u))
    opened = None
    try:
        opened = fmt.open_file(whole, fmt.b64d(r0["key"]), fmt.b64d(r0["digest"]), r0["size"], r0["plain_size"])
    except fmt.FormatError as e:
        opened = e
    ok("the download verifies (digest) and decrypts to the file (attachments.md §2)", opened == plain, f"{opened!r}"[:200])
    ok("control: the blob's bytes are in the relay's blob folder", len(blob_files(c)) >= 1, os.listdir(c.relay.data))
    expect("bob acknowledges → 204 (§4.19)", request(rel, "POST", f"/v1/blobs/{bid}/ack", session=b.session), 204)
    expect("then bob's GET → 404 (no longer a recipient)", request(rel, "GET", f"/v1/blobs/{bid}/content", session=b.session), 404, "not_found")
    expect("the last acknowledgement erased it: the author's GET → 404 (§6)",
           request(rel, "GET", f"/v1/blobs/{bid}", session=a.session), 404, "not_found")
    expect("a second acknowledgement → 404", request(rel, "POST", f"/v1/blobs/{bid}/ack", session=b.session), 404, "not_found")
    deadline = time.monotonic() + TIMEOUT
    while blob_files(c) and time.monotonic() < deadline:
        time.sleep(0.1)
    ok("nothing is left under the relay's blobs/ folder (§6)", not blob_files(c), f"{blob_files(c)}")
    lst = request(rel, "GET", f"/v1/users/{a.uid}/blobs", session=a.session)
    ok("the author's list is empty", lst.status == 200 and lst.json == {"blobs": [], "next": None}, repr(lst))

    # the author deletes an unfinished upload; an upload it abandons is gone for the recipient too
    bid2 = blob_id()
    request(rel, "POST", "/v1/blobs", {"id": bid2, "size": fmt.file_size(1), "recipients": [b.uid]}, a.session)
    expect("the author deletes its unfinished upload → 204 (§4.20)", request(rel, "DELETE", f"/v1/blobs/{bid2}", session=a.session), 204)
    expect("… then the recipient's GET → 404", request(rel, "GET", f"/v1/blobs/{bid2}", session=b.session), 404, "not_found")


def scenario_files_with_swift(c):
    """Files between this implementation and the Swift CLI (attachments.md §6): a file sealed here,
    uploaded in parts and referenced in a `file` message, saved byte for byte by the CLI's
    `receive --save-to`; the CLI's `send --file` downloaded here with a Range across a part
    boundary, verified, opened and acknowledged; both blobs gone from the relay afterwards. The
    Python side publishes a version 1 bundle, so the CLI seals version 1 envelopes to it."""
    rel = c.relay
    if not os.access(c.cli_binary, os.X_OK):
        return ok("the mailslot CLI binary is present", False, c.cli_binary)
    cli = Cli(c.cli_binary, os.path.join(c.tmp, "mailslot-files-home"))
    py = User("pyfiler")
    py.grant = sign_in(rel, c.issuer, py)
    expect("pyfiler publishes a version 1 bundle → 204", request(rel, "PUT", f"/v1/users/{py.uid}/keys", py.bundle(), py.session,
                                                                 ctype="application/json"), 204)
    rc, lines, err = cli.run("login", "--profile", "swfiler", "--relay", f"http://127.0.0.1:{rel.port}", "--token", "-", "--json",
                             stdin=c.issuer.token("swfiler") + "\n")
    if not ok("CLI `login` as swfiler → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}"):
        return
    fetch_bundle(rel, py, "swfiler")

    # Python → CLI
    plain = os.urandom(2_300_000)
    key, ct, digest = seal_file_push(plain)
    bid = blob_id()
    r = request(rel, "POST", "/v1/blobs", {"id": bid, "size": len(ct), "recipients": ["swfiler"]}, py.session)
    ok("pyfiler creates a blob for swfiler → 201", r.status == 201, repr(r))
    parts = -(-len(ct) // BLOB_PART)
    first = ct[:BLOB_PART]
    expect("a part with another part's digest → 400 part_digest_mismatch",
           put_part(rel, py.session, bid, 1, first, digest=part_digest(ct[BLOB_PART:2 * BLOB_PART])), 400, "part_digest_mismatch")
    answers = [put_part(rel, py.session, bid, n, ct[(n - 1) * BLOB_PART:n * BLOB_PART]) for n in range(1, parts + 1)]
    ok(f"then its {parts} parts → 200, complete", all(a.status == 200 for a in answers) and answers[-1].json.get("state") == "complete",
       f"{answers}")
    mid = new_id()
    ref = {"blob": bid, "key": fmt.b64e(key), "digest": fmt.b64e(digest), "size": len(ct), "plain_size": len(plain),
           "media_type": "application/octet-stream", "name": "from python.bin"}
    env = py.seal("swfiler", mid, py.body("file", {"files": [ref], "text": "for the CLI"}))
    expect("the `file` message to swfiler → 201",
           request(rel, "PUT", f"/v1/users/swfiler/messages/{mid}", {"envelope": fmt.b64e(env)}, py.session), 201)
    save = os.path.join(c.tmp, "cli-saved")
    rc, lines, err = cli.run("receive", "--profile", "swfiler", "--json", "--save-to", save)
    got = [m for m in lines if m.get("id") == mid]
    atts = got[0].get("attachments", []) if got else []
    path = atts[0].get("path") if atts else None
    same = bool(path) and os.path.isfile(path) and open(path, "rb").read() == plain
    ok("CLI `receive --save-to DIR --json` saves the file byte for byte and prints its path (attachments[].path, bytes, name)",
       rc == 0 and same and os.path.dirname(path) == save and atts[0].get("bytes") == len(plain) and atts[0].get("name") == "from python.bin",
       f"exit {rc}, {lines}, stderr {err!r}")
    expect("the CLI acknowledged it: the blob is gone for its author (404)", request(rel, "GET", f"/v1/blobs/{bid}", session=py.session),
           404, "not_found")

    # CLI → Python
    src = os.path.join(c.tmp, "from-cli.bin")
    data = os.urandom(2_700_000)
    with open(src, "wb") as f:
        f.write(data)
    rc, lines, err = cli.run("send", "--profile", "swfiler", "--json", py.uid, "--file", src, "a caption")
    ok("CLI `send --file` → exit 0, state sent", rc == 0 and lines and lines[-1].get("state") == "sent", f"exit {rc}, {lines}, stderr {err!r}")
    r = request(rel, "GET", f"/v1/users/{py.uid}/messages", session=py.session)
    recs = r.json.get("messages", []) if r.status == 200 else []
    if not ok("pyfiler's mailbox holds the CLI's message", len(recs) == 1, repr(r)):
        return
    _, _, msg = accept(py, recs[0])
    files = (msg.get("payload") or {}).get("files") or []
    ok("a `file` message with one reference, the caption as text, the file's name and size (attachments.md §3)",
       msg.get("type") == "file" and len(files) == 1 and msg["payload"].get("text") == "a caption"
       and files[0].get("name") == "from-cli.bin" and files[0].get("plain_size") == len(data)
       and files[0].get("size") == fmt.file_size(len(data)), f"{msg}")
    if not files:
        return
    f0 = files[0]
    rec = request(rel, "GET", f"/v1/blobs/{f0['blob']}", session=py.session)
    ps = rec.json.get("part_size") if rec.status == 200 else None
    ok("pyfiler reads the blob's record: complete, a recipient's view", rec.status == 200 and rec.json.get("state") == "complete"
       and "recipients" not in rec.json and ps, repr(rec))
    ps = ps or BLOB_PART
    lo, hi = ps - 500, ps + 499
    g = request(rel, "GET", f"/v1/blobs/{f0['blob']}/content", session=py.session, headers={"Range": f"bytes={lo}-{hi}"})
    rest = request(rel, "GET", f"/v1/blobs/{f0['blob']}/content", session=py.session, headers={"Range": f"bytes={hi + 1}-"}, timeout=30)
    head = request(rel, "GET", f"/v1/blobs/{f0['blob']}/content", session=py.session, headers={"Range": f"bytes=0-{lo - 1}"}, timeout=30)
    whole = head.body + g.body + rest.body
    ok("downloaded in three ranges, one across the part boundary (206 each)",
       (head.status, g.status, rest.status) == (206, 206, 206) and len(whole) == f0["size"], f"{head.status} {g.status} {rest.status} {len(whole)}")
    try:
        opened = fmt.open_file(whole, fmt.b64d(f0["key"]), fmt.b64d(f0["digest"]), f0["size"], f0["plain_size"])
    except fmt.FormatError as e:
        opened = e
    ok("the CLI's file verifies and opens here to the bytes sent (attachments.md §2)", opened == data, f"{opened!r}"[:200])
    expect("pyfiler acknowledges the blob → 204", request(rel, "POST", f"/v1/blobs/{f0['blob']}/ack", session=py.session), 204)
    expect("then the blob → 404", request(rel, "GET", f"/v1/blobs/{f0['blob']}/content", session=py.session), 404, "not_found")
    request(rel, "DELETE", f"/v1/users/{py.uid}/messages/{recs[0]['id']}", session=py.session)
    deadline = time.monotonic() + TIMEOUT
    while blob_files(c) and time.monotonic() < deadline:
        time.sleep(0.1)
    ok("nothing is left under the relay's blobs/ folder", not blob_files(c), f"{blob_files(c)}")


SCENARIOS = [("start", scenario_start, None), ("sign in", scenario_sign_in, None), ("keys", scenario_keys, "sign in"),
             ("chat", scenario_chat, "keys"), ("key ids", scenario_key_ids, "sign in"), ("sessions", scenario_sessions, None), ("rules", scenario_rules, "keys"),
             ("json, sizes, media types", scenario_json_and_sizes, "sign in"), ("paging", scenario_paging, "sign in"),
             ("leases", scenario_leases, "sign in"), ("expiry", scenario_expiry, "sign in"),
             ("mailbox full", scenario_mailbox_full, "sign in"), ("window", scenario_window, "sign in"),
             ("rate", scenario_rate, "sign in"),
             ("send to many", lambda c: batch_story.scenario_batch(c, sys.modules[__name__]), "sign in"),
             ("socket sessions", scenario_socket_sessions, "sign in"), ("prekeys", scenario_prekeys, None),
             ("sessions with the Swift CLI", scenario_sessions_with_swift, None), ("blobs", scenario_blobs, "keys"),
             ("files with the Swift CLI", scenario_files_with_swift, None),
             ("a group with the Swift CLI", lambda c: group_story.scenario_groups_with_cli(c, sys.modules[__name__]), None),
             ("wake-ups with the Swift CLI", lambda c: push_story.scenario_wakeups_with_cli(
                 c, ok, NOTES.append, Relay, Cli, User, request, sign_in, WS, rand_envelope, new_id), None),
             ("erasure", scenario_erasure, None)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relay-binary", required=True)
    ap.add_argument("--cli-binary", help="the `mailslot` CLI (default: `mailslot` beside the relay binary)")
    ap.add_argument("--only", metavar="REGEX", help="run only the scenarios whose name matches (start and sign-in always run)")
    args = ap.parse_args()
    if not os.access(args.relay_binary, os.X_OK):
        ok("relay binary present", False, args.relay_binary)
        print("0 passed, 1 failed")
        return 1
    binary = os.path.abspath(args.relay_binary)
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="mailslot-interop-")
    c = Ctx()
    c.issuer = Issuer()
    c.relay = Relay(binary, tmp, c.issuer.public)
    c.sockets, c.erased, c.broken = [], [], set()
    c.tmp = tmp
    c.cli_binary = os.path.abspath(args.cli_binary or os.path.join(os.path.dirname(binary), "mailslot"))
    c.users = {u: User(u) for u in ("alice", "bob", "carol", "lim", "dora", "filler", "flood", "gina", "hana", "winnie", "kim", "ken", "pia", "quin", "rex")}
    try:
        usage_errors(binary, tmp)
        try:
            c.health = c.relay.start()
        except Exception as e:
            ok("relay starts and answers /healthz", False, str(e))
            return 1
        ok(f"relay starts on 127.0.0.1:{c.relay.port} and answers /healthz", True)
        for name, fn, needs in SCENARIOS:
            if args.only and name not in ("start", "sign in") and not re.search(args.only, name):
                continue
            if needs in c.broken:
                ok(f"scenario {name}", False, f"skipped: {needs} did not complete")
                c.broken.add(name)
                continue
            try:
                fn(c)
            except Exception as e:
                ok(f"scenario {name} completes", False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
                c.broken.add(name)
            if c.relay.proc.poll() is not None:
                ok("relay still running", False, f"exited {c.relay.proc.returncode}:\n{c.relay.log_tail()}")
                break
    finally:
        for w in c.sockets:
            w.close()
        if c.relay.proc is not None:
            alive = c.relay.proc.poll() is None
            rc = c.relay.stop()
            ok("SIGTERM: the relay exits 0 within 5 s (§6)", alive and rc == 0, f"exit {rc}\n{c.relay.log_tail()}")
            wal = os.path.join(c.relay.data, "relay.sqlite-wal")
            ok("after shutdown the WAL is checkpointed: empty or gone (§6)", not os.path.exists(wal) or os.path.getsize(wal) == 0,
               f"{os.path.getsize(wal) if os.path.exists(wal) else 0} bytes")
        shutil.rmtree(tmp, ignore_errors=True)
    for n in NOTES:
        print(f"note: {n}")
    failed = RESULTS.count(False)
    print(f"{len(RESULTS) - failed} passed, {failed} failed ({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
