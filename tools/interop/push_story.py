"""Issue 29's "done when", tried as a new user would, with the Swift CLI (relay_client.py runs it).

Bob registers a Web Push subscription with `mailslot push add webpush`, and his client is closed;
alice sends him three messages in a row; a Web Push receiver here gets exactly one wake-up that
decrypts (Mozilla's http_ece) to bob's tag and nothing else, with a VAPID header that py_vapid
verifies and whose claims hold (RFC 8292); while bob listens, no wake-up; when the receiver answers
410, `mailslot push list` shows the registration gone. Written from spec/push.md and
spec/protocol.md; the relay is a second one, started with a VAPID key py_vapid made.
"""
import base64, http.server, json, os, re, socketserver, subprocess, threading, time

import http_ece
import py_vapid
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

SUBJECT = "mailto:interop@mailslot.invalid"
INTERVAL = 5                      # --push-wake-interval: the least, so the story stays short


def b64e(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Receiver:
    """A Web Push push resource on 127.0.0.1: one subscription, every request checked and logged."""

    def __init__(self, vapid_public):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.vapid_public = vapid_public
        self.log = []
        self.next = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                entry = receiver.check(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with receiver.lock:
                    status = receiver.next.pop(0) if receiver.next and entry["ok"] else (201 if entry["ok"] else 400)
                    entry["status"] = status
                    receiver.log.append(entry)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}/push/interop-bob"

    @property
    def p256dh(self):
        return b64e(self.key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))

    def check(self, path, headers, body):
        e = {"ok": False, "time": time.time(), "path": path}
        try:
            assert path == "/push/interop-bob", "path"
            assert re.fullmatch(r"[0-9]+", headers.get("ttl", "")), "TTL missing (RFC 8030 §5.2)"
            assert headers.get("content-encoding") == "aes128gcm", "Content-Encoding"
            auth = headers.get("authorization", "")
            m = re.fullmatch(r"vapid t=([^,\s]+),k=([A-Za-z0-9_-]+)", auth)
            assert m, "Authorization is not vapid t=…,k=…"
            assert m.group(2) == self.vapid_public, "k is not the relay's VAPID key"
            assert py_vapid.Vapid02.verify(auth), "py_vapid: the signature does not verify"
            head, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in m.group(1).split(".")[:2])
            now = time.time()
            assert head.get("alg") == "ES256", "alg"
            assert claims.get("aud") == f"http://127.0.0.1:{self.port}", "aud is not the origin"
            assert now < claims.get("exp", 0) <= now + 86400, "exp not within 24 h"
            assert claims.get("sub") == SUBJECT, "sub"
            e["body_length"] = len(body)
            e["plaintext"] = http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth, version="aes128gcm").decode()
            e["ok"] = True
        except Exception as error:  # the reason goes into the FAIL line
            e["why"] = f"{type(error).__name__}: {error}"
        return e

    def entries(self):
        with self.lock:
            return list(self.log)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def wait(condition, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def cli_registrations(lines):
    """`mailslot push list --json`: one JSON array, or one registration a line."""
    if len(lines) == 1 and isinstance(lines[0], list):
        return lines[0]
    if len(lines) == 1 and isinstance(lines[0], dict) and "registrations" in lines[0]:
        return lines[0]["registrations"]
    return [line for line in lines if isinstance(line, dict) and "id" in line]


def scenario_wakeups_with_cli(c, ok, note, Relay, Cli, User, request, sign_in, WS, rand_envelope, new_id):
    if not os.access(c.cli_binary, os.X_OK):
        return ok("the mailslot CLI binary is present", False, c.cli_binary)
    tmp = os.path.join(c.tmp, "push")
    os.makedirs(tmp, mode=0o700)
    cli = Cli(c.cli_binary, os.path.join(tmp, "home"))
    rc, _, _ = cli.run("push", "--help")
    if rc != 0:
        note("wake-up story skipped: this CLI has no `mailslot push` command")
        return
    serve_help = subprocess.run([c.relay.binary, "serve", "--help"], capture_output=True, text=True, timeout=30)
    if "--vapid-key" not in serve_help.stdout + serve_help.stderr:
        note("wake-up story skipped: this relay's serve has no --vapid-key")
        return
    vapid = py_vapid.Vapid02()
    vapid.generate_keys()
    key_path = os.path.join(tmp, "vapid.pem")
    vapid.save_key(key_path)
    os.chmod(key_path, 0o600)
    vapid_public = b64e(vapid.public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))
    relay = Relay(c.relay.binary, tmp, c.issuer.public,
                  extra=["--vapid-key", key_path, "--vapid-subject", SUBJECT, "--push-allow-private-addresses",
                         "--push-wake-interval", str(INTERVAL)])
    receiver = Receiver(vapid_public)
    sockets = []
    try:
        relay.start()
        info = request(relay, "GET", "/v1/push", session=sign_in(relay, c.issuer, User("pcarol"))["session"])
        ok("GET /v1/push names webpush and the relay's VAPID key (py_vapid's PEM read)",
           info.status == 200 and "webpush" in info.json.get("providers", []) and info.json.get("vapid_public_key") == vapid_public, repr(info))

        rc, lines, err = cli.run("login", "--profile", "pbob", "--relay", f"http://127.0.0.1:{relay.port}", "--token", "-", "--json",
                                 stdin=c.issuer.token("pbob") + "\n")
        ok("CLI login as pbob → exit 0", rc == 0, f"exit {rc}, stderr {err!r}")
        tag = b64e(os.urandom(16))
        rc, lines, err = cli.run("push", "add", "webpush", receiver.endpoint, "--p256dh", receiver.p256dh, "--auth", b64e(receiver.auth),
                                 "--tag", tag, "--profile", "pbob")
        ok("CLI `push add webpush ENDPOINT --p256dh --auth --tag` → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
        rc, lines, err = cli.run("push", "list", "--json", "--profile", "pbob")
        listed = cli_registrations(lines)
        ok("CLI `push list --json` shows the registration, its endpoint and tag, never the keys",
           rc == 0 and len(listed) == 1 and listed[0].get("endpoint") == receiver.endpoint and listed[0].get("tag") == tag
           and "p256dh" not in listed[0] and "auth" not in listed[0], f"exit {rc}, {lines}, stderr {err!r}")

        alice = User("palice")
        alice.grant = sign_in(relay, c.issuer, alice)
        for _ in range(3):
            r = request(relay, "PUT", f"/v1/users/pbob/messages/{new_id()}", {"envelope": rand_envelope()}, alice.session)
            ok("alice's message to offline pbob → 201", r.status == 201, repr(r))
        wait(lambda: receiver.entries(), 15)
        time.sleep(2)   # a second wake-up would come now if the three were not coalesced
        got = receiver.entries()
        ok("three messages in a row → exactly one wake-up", len(got) == 1, repr(got))
        if got:
            ok("the wake-up verifies (py_vapid + RFC 8292 claims) and decrypts with http_ece to bob's tag and nothing else",
               got[0]["ok"] and got[0]["plaintext"] == tag and got[0]["body_length"] == 166, repr(got[0]))

        bob = User("pbob")
        bob.grant = sign_in(relay, c.issuer, bob)
        ws = WS(relay, "pbob", bob.session)
        sockets.append(ws)
        ws.frame(lambda f: f.get("type") == "ready")
        r = request(relay, "PUT", f"/v1/users/pbob/messages/{new_id()}", {"envelope": rand_envelope()}, alice.session)
        ok("a message while pbob listens → 201, delivered", r.status == 201 and ws.frame(lambda f: f.get("type") == "message") is not None, repr(r))
        time.sleep(INTERVAL + 2)
        ok("while bob listens, no wake-up (even after the interval)", len(receiver.entries()) == 1, repr(receiver.entries()))

        with receiver.lock:
            receiver.next = [410]
        ws.close()
        sockets.remove(ws)
        ok("once bob is gone, the pending message wakes him (answered 410)",
           wait(lambda: len(receiver.entries()) >= 2, 30) and receiver.entries()[1]["status"] == 410, repr(receiver.entries()))

        def gone():
            rc, lines, _ = cli.run("push", "list", "--json", "--profile", "pbob")
            return rc == 0 and cli_registrations(lines) == []
        ok("after the 410, `mailslot push list` shows the registration gone", wait(gone, 15))
    finally:
        for ws in sockets:
            ws.close()
        receiver.stop()
        relay.stop()
