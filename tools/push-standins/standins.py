#!/usr/bin/env python3
"""Local stand-ins for the push services the relay calls (issue 29; docs/design/wakeups.md §9.2).

    standins.py keygen DIR      throwaway CA + loopback certificate, VAPID key (py_vapid's own
                                generate/save), APNs .p8-style P-256 key, 2048-bit RSA service-account
                                JSON, webhook secrets; every file mode 0600
    standins.py serve DIR       the stand-ins on free 127.0.0.1 ports; writes DIR/ports.json and
                                DIR/relay-arguments.json once every port is bound; runs until TERM

One process, these servers (each checks every request strictly as its provider documents it;
a request that fails a check is answered with the provider's error and the reason is logged and
put in the answer body):

    webpush, webpush_tls   RFC 8030 receiver (plain HTTP and TLS): TTL, Urgency, Topic,
                           Content-Encoding aes128gcm, VAPID verified with py_vapid plus the claims by
                           hand (RFC 8292), body decrypted with http_ece (RFC 8291), 166 bytes
    apns, apns_sandbox     HTTP/2 over TLS (ALPN h2): the ES256 provider token, the apns-* headers,
                           the payload of spec/push.md
    fcm                    TLS: Google's OAuth token endpoint (POST /token, RS256 assertion) and
                           FCM HTTP v1 (POST /v1/projects/P/messages:send)
    webhook                plain HTTP: Standard Webhooks 1.0 signature, 5-minute window, duplicates
    control                plain HTTP, for tests:
                             POST /NAME/_control  {"next":[410, {"status":429,"retry_after":7}]},
                                                  {"hang":true}, {"status":500,"for_seconds":60},
                                                  {"reset":true}
                             GET  /NAME/_log      the requests as JSON lines (verified fields, why not)
                             GET  /NAME/_state    counters: requests, hanging, max_hanging, …
                             POST /webpush/_subscribe  {"host":"127.0.0.1","tls":false} → a test
                                                  subscription {"id","endpoint","p256dh","auth"}
                             POST /_reset         every stand-in's queue, log and counters
                           (the HTTP/1.1 stand-ins also answer /_control, /_log and /_state themselves)

NAME is webpush (both Web Push listeners), apns (both APNs listeners), oauth, fcm or webhook.
Everything listens on 127.0.0.1 only.
"""

import base64
import datetime
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import re
import secrets
import select
import signal
import socket
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events
import http_ece
import py_vapid
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID

LOOPBACK = "127.0.0.1"
VAPID_SUBJECT = "mailto:push-tests@mailslot.invalid"
APNS_KEY_ID = "K3Y1D0APNS"
APNS_TEAM_ID = "T3AM1D0001"
APNS_TOPIC = "net.mailslot.tests"
FCM_PROJECT = "mailslot-tests"
FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
WEB_PUSH_BODY = 166  # spec/push.md: every Web Push wake-up body, whatever the tag
TAG = re.compile(r"^[A-Za-z0-9_-]{0,48}$")
B64URL = re.compile(r"^[A-Za-z0-9_-]+$")
HANG_LIMIT = 120.0  # seconds a hung request is held at most (then the connection is closed)
LOG_LIMIT = 10_000  # entries kept per stand-in


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    if isinstance(text, str):
        text = text.encode()
    if not re.fullmatch(rb"[A-Za-z0-9_-]*", text):
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))


def write_private(path, data):
    """Writes DATA to PATH with mode 0600 (the relay refuses group/world-readable key files)."""
    if isinstance(data, str):
        data = data.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def write_json_atomically(path, value):
    tmp = path + ".tmp"
    write_private(tmp, json.dumps(value, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class Rejected(Exception):
    """A request that fails a check: the provider's status and error, and why (logged, answered)."""

    def __init__(self, status, reason, why):
        super().__init__(why)
        self.status = status
        self.reason = reason
        self.why = why


def split_jwt(token):
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("a JWT has three dot-separated parts")
    header = json.loads(unb64url(parts[0]))
    claims = json.loads(unb64url(parts[1]))
    signature = unb64url(parts[2])
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("JWT header and claims must be JSON objects")
    return header, claims, signature, (parts[0] + "." + parts[1]).encode()


def verify_es256(public_key, signature, signed):
    if len(signature) != 64:
        raise ValueError("an ES256 signature is the 64-byte r||s (RFC 7518 §3.4), got %d bytes" % len(signature))
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    public_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))


# ----------------------------------------------------------------------------------------------
# keygen


def keygen(folder):
    os.makedirs(folder, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mailslot push stand-ins test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    host = socket.gethostname()
    if host and host != "localhost":
        names.append(x509.DNSName(host))  # SSRF tests: a name that resolves to a private address
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    write_private(os.path.join(folder, "ca.pem"), ca.public_bytes(pem))
    write_private(os.path.join(folder, "server.pem"), server.public_bytes(pem))
    write_private(os.path.join(folder, "server-key.pem"), server_key.private_bytes(pem, pkcs8, none))

    # VAPID with py_vapid's own generate and save: the relay must read the PEM py_vapid writes.
    vapid = py_vapid.Vapid02()
    vapid.generate_keys()
    vapid.save_key(os.path.join(folder, "vapid.pem"))
    os.chmod(os.path.join(folder, "vapid.pem"), 0o600)

    # APNs: Apple's .p8 is a PKCS#8 PEM P-256 key.
    apns = ec.generate_private_key(ec.SECP256R1())
    write_private(os.path.join(folder, "apns.p8"), apns.private_bytes(pem, pkcs8, none))

    # FCM: a service-account JSON as Google gives it (token_uri rewritten by `serve` to the stand-in).
    account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    account = {
        "type": "service_account",
        "project_id": FCM_PROJECT,
        "private_key_id": secrets.token_hex(20),
        "private_key": account_key.private_bytes(pem, pkcs8, none).decode(),
        "client_email": "mailslot-push@%s.iam.gserviceaccount.com" % FCM_PROJECT,
        "client_id": str(secrets.randbelow(10**20)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    write_json_atomically(os.path.join(folder, "fcm-service-account.json"), account)

    # Webhook: two secrets (rotation: the relay signs with every line).
    lines = ["whsec_" + base64.b64encode(secrets.token_bytes(32)).decode() for _ in range(2)]
    write_private(os.path.join(folder, "webhook-secrets"), "\n".join(lines) + "\n")


# ----------------------------------------------------------------------------------------------
# the stand-ins' shared state


class StandIn:
    """One stand-in's behaviour on command and its log."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.reset()

    def reset(self):
        with self.lock:
            self.queue = []
            self.hang = False
            self.until = 0.0
            self.until_status = None
            self.log = []
            self.requests = 0
            self.hanging = 0
            self.max_hanging = 0
            self.in_flight = 0
            self.max_in_flight = 0
            self.seen_ids = set()
            self.released.set()
            self.released = threading.Event()

    def control(self, command):
        if not isinstance(command, dict):
            raise ValueError("a control command is a JSON object")
        known = {"next", "hang", "status", "for_seconds", "reset"}
        unknown = set(command) - known
        if unknown:
            raise ValueError("unknown control members: %s" % ", ".join(sorted(unknown)))
        if command.get("reset"):
            self.reset()
        with self.lock:
            if "next" in command:
                entries = command["next"]
                if not isinstance(entries, list):
                    raise ValueError("next is a list")
                for entry in entries:
                    if isinstance(entry, int):
                        entry = {"status": entry}
                    if not isinstance(entry, dict) or not isinstance(entry.get("status"), int):
                        raise ValueError("a next entry is a status or {\"status\":…,\"reason\"?,\"retry_after\"?}")
                    self.queue.append(entry)
            if "hang" in command:
                self.hang = bool(command["hang"])
                if not self.hang:
                    self.released.set()
                    self.released = threading.Event()
            if "status" in command:
                self.until_status = {"status": int(command["status"])}
                self.until = time.time() + float(command.get("for_seconds", 60))

    def decide(self):
        """What to answer a request that passed every check: None (success), "hang" or an entry."""
        with self.lock:
            if self.hang:
                return "hang", self.released
            if self.queue:
                return self.queue.pop(0), None
            if self.until_status and time.time() < self.until:
                return dict(self.until_status), None
            return None, None

    def record(self, entry):
        entry.setdefault("time", time.time())
        entry["standin"] = self.name
        with self.lock:
            self.log.append(entry)
            del self.log[:-LOG_LIMIT]

    def enter(self):
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self):
        with self.lock:
            self.in_flight -= 1

    def hold(self, released, gone=lambda: False):
        """Holds a request that is to hang until released, reset, HANG_LIMIT or the client's leaving
        (`gone`: it gave up, e.g. its call timed out), so that `hanging` counts the calls the client
        still has open — what its concurrency bounds are about."""
        with self.lock:
            self.hanging += 1
            self.max_hanging = max(self.max_hanging, self.hanging)
        try:
            deadline = time.time() + HANG_LIMIT
            while not released.wait(0.1) and time.time() < deadline and not gone():
                pass
        finally:
            with self.lock:
                self.hanging -= 1

    def state(self):
        with self.lock:
            return {
                "requests": self.requests,
                "logged": len(self.log),
                "accepted": sum(1 for e in self.log if e.get("ok")),
                "hanging": self.hanging,
                "max_hanging": self.max_hanging,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "queued": len(self.queue),
                # APNs: distinct provider tokens seen (Apple: renew no more than every 20 minutes);
                # webhook: distinct webhook-ids.
                "distinct_ids": len(self.seen_ids),
            }

    def log_lines(self):
        with self.lock:
            return "".join(json.dumps(e, sort_keys=True) + "\n" for e in self.log)


class Keys:
    """What the stand-ins verify against, read from the keygen folder."""

    def __init__(self, folder):
        self.folder = folder
        vapid = py_vapid.Vapid02.from_file(os.path.join(folder, "vapid.pem"))
        point = vapid.public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        self.vapid_public = b64url(point)
        with open(os.path.join(folder, "apns.p8"), "rb") as f:
            self.apns_public = serialization.load_pem_private_key(f.read(), None).public_key()
        with open(os.path.join(folder, "fcm-service-account.json")) as f:
            self.account = json.load(f)
        self.account_public = serialization.load_pem_private_key(self.account["private_key"].encode(), None).public_key()
        with open(os.path.join(folder, "webhook-secrets")) as f:
            self.webhook_keys = [base64.b64decode(line.strip()[len("whsec_"):]) for line in f if line.strip()]
        self.subscriptions = {}  # id → (private key, auth secret)
        self.tokens = {}  # issued OAuth access token → expiry (Unix seconds)
        self.lock = threading.Lock()


# ----------------------------------------------------------------------------------------------
# checks, one function per provider: request in, (log fields, success answer) out, or Rejected


def check_web_push(keys, method, path, headers, body, scheme):
    fields = {"path": path}
    if method != "POST":
        raise Rejected(405, "method", "a push message is a POST (RFC 8030 §5), got %s" % method)
    m = re.fullmatch(r"/push/([A-Za-z0-9_-]+)", path)
    if not m:
        raise Rejected(404, "path", "not a push resource: %s" % path)
    sid = m.group(1)
    fields["subscription"] = sid
    with keys.lock:
        sub = keys.subscriptions.get(sid)
    if sub is None:
        raise Rejected(404, "subscription", "no such subscription (RFC 8030 §7.3: 404 for an expired one)")
    ttl = headers.get("ttl")
    if ttl is None:
        raise Rejected(400, "ttl", "TTL header missing (RFC 8030 §5.2: the application server MUST include it)")
    if not re.fullmatch(r"[0-9]+", ttl) or int(ttl) > 86400 * 28:
        raise Rejected(400, "ttl", "TTL is not a delta-seconds value: %r" % ttl)
    fields["ttl"] = int(ttl)
    urgency = headers.get("urgency")
    if urgency is not None and urgency not in ("very-low", "low", "normal", "high"):
        raise Rejected(400, "urgency", "Urgency must be very-low, low, normal or high (RFC 8030 §5.3): %r" % urgency)
    fields["urgency"] = urgency
    topic = headers.get("topic")
    if topic is not None and (len(topic) > 32 or not B64URL.fullmatch(topic)):
        raise Rejected(400, "topic", "Topic must be at most 32 base64url characters (RFC 8030 §5.4): %r" % topic)
    fields["topic"] = topic
    if headers.get("content-encoding") != "aes128gcm":
        raise Rejected(400, "content-encoding", "Content-Encoding must be aes128gcm (RFC 8291 §4): %r" % headers.get("content-encoding"))
    authorization = headers.get("authorization")
    if not authorization:
        raise Rejected(401, "authorization", "no Authorization header: VAPID is required (RFC 8292 §3)")
    m = re.fullmatch(r"vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)", authorization)
    if not m:
        raise Rejected(401, "authorization", "Authorization is not 'vapid t=JWT,k=KEY' (RFC 8292 §3)")
    token, key = m.group(1), m.group(2)
    if key != keys.vapid_public:
        raise Rejected(403, "vapid-key", "k is not the VAPID public key this subscription was made for")
    try:
        verified = py_vapid.Vapid02.verify(authorization)
    except Exception as error:  # py_vapid asserts and raises on malformed input
        raise Rejected(401, "vapid", "py_vapid could not verify the header: %r" % error)
    if not verified:
        raise Rejected(401, "vapid", "py_vapid: the JWT's ES256 signature does not verify with k")
    try:
        header, claims, _, _ = split_jwt(token)
    except Exception as error:
        raise Rejected(401, "vapid", "the VAPID JWT is malformed: %s" % error)
    if header.get("alg") != "ES256":
        raise Rejected(401, "vapid", "VAPID JWT alg must be ES256 (RFC 8292 §2): %r" % header.get("alg"))
    if header.get("typ") not in (None, "JWT"):
        raise Rejected(401, "vapid", "VAPID JWT typ must be JWT: %r" % header.get("typ"))
    host = headers.get("host", "")
    default = ":443" if scheme == "https" else ":80"
    origin = "%s://%s" % (scheme, host[: -len(default)] if host.endswith(default) else host)
    if claims.get("aud") != origin:
        raise Rejected(403, "vapid", "aud %r is not the push resource's origin %r (RFC 8292 §2)" % (claims.get("aud"), origin))
    now = time.time()
    exp = claims.get("exp")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise Rejected(403, "vapid", "exp must be an integer (RFC 8292 §2)")
    if exp <= now:
        raise Rejected(403, "vapid", "the VAPID JWT expired %d s ago" % (now - exp))
    if exp > now + 86400 + 5:
        raise Rejected(403, "vapid", "exp is more than 24 hours ahead (RFC 8292 §2): %d s" % (exp - now))
    sub_claim = claims.get("sub")
    if not isinstance(sub_claim, str) or not (sub_claim.startswith("mailto:") or sub_claim.startswith("https:")):
        raise Rejected(403, "vapid", "sub must be a mailto: or https: URI (RFC 8292 §2.1): %r" % sub_claim)
    if sub_claim != VAPID_SUBJECT:
        raise Rejected(403, "vapid", "sub %r is not the configured subject %r" % (sub_claim, VAPID_SUBJECT))
    fields["claims"] = claims
    fields["vapid_header"] = header
    fields["body_length"] = len(body)
    if len(body) < 21 + 65 or body[16:20] != (4096).to_bytes(4, "big") or body[20] != 65:
        raise Rejected(400, "body", "the aes128gcm header is not salt(16) rs=4096 idlen=65 (RFC 8291 §4)")
    private_key, auth = sub
    try:
        plaintext = http_ece.decrypt(body, private_key=private_key, auth_secret=auth, version="aes128gcm")
    except Exception as error:
        raise Rejected(400, "decrypt", "http_ece could not decrypt the body: %r" % error)
    if len(body) != WEB_PUSH_BODY:
        raise Rejected(400, "body", "the body is %d bytes, spec/push.md fixes %d" % (len(body), WEB_PUSH_BODY))
    try:
        tag = plaintext.decode("ascii")
    except UnicodeDecodeError:
        raise Rejected(400, "payload", "the decrypted payload is not ASCII")
    if not TAG.fullmatch(tag):
        raise Rejected(400, "payload", "the decrypted payload is not a tag (^[A-Za-z0-9_-]{0,48}$): %r" % tag)
    fields["tag"] = tag
    return fields


def check_apns(keys, state, headers, body, sandbox, connection):
    fields = {"sandbox": sandbox}
    if headers.get(":method") != "POST":
        raise Rejected(405, "MethodNotAllowed", "APNs takes POST, got %r" % headers.get(":method"))
    m = re.fullmatch(r"/3/device/([0-9a-f]+)", headers.get(":path", ""))
    if not m:
        raise Rejected(404, "BadPath", "the path is not /3/device/<lowercase hex token>: %r" % headers.get(":path"))
    fields["token"] = m.group(1)
    authorization = headers.get("authorization", "")
    if not authorization.startswith("bearer "):
        raise Rejected(403, "MissingProviderToken", "authorization is not 'bearer <JWT>'")
    jwt = authorization[len("bearer "):]
    try:
        header, claims, signature, signed = split_jwt(jwt)
    except Exception as error:
        raise Rejected(403, "InvalidProviderToken", "the provider token is malformed: %s" % error)
    if header.get("alg") != "ES256" or header.get("kid") != APNS_KEY_ID:
        raise Rejected(403, "InvalidProviderToken", "header must have alg ES256 and kid %s: %r" % (APNS_KEY_ID, header))
    try:
        verify_es256(keys.apns_public, signature, signed)
    except (InvalidSignature, ValueError) as error:
        raise Rejected(403, "InvalidProviderToken", "the ES256 signature does not verify with the .p8's key: %r" % error)
    if claims.get("iss") != APNS_TEAM_ID:
        raise Rejected(403, "InvalidProviderToken", "iss must be the team id %s: %r" % (APNS_TEAM_ID, claims.get("iss")))
    iat = claims.get("iat")
    now = time.time()
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise Rejected(403, "InvalidProviderToken", "iat must be an integer")
    if iat < now - 3600:
        raise Rejected(403, "ExpiredProviderToken", "the token is %d s old (Apple: at most an hour)" % (now - iat))
    if iat > now + 3600:
        raise Rejected(403, "InvalidProviderToken", "iat is %d s in the future" % (iat - now))
    # Apple refuses a provider token that changes more often than every 20 minutes.
    previous = connection.get("token")
    if previous is not None and previous[0] != jwt and now - previous[1] < 20 * 60:
        raise Rejected(429, "TooManyProviderTokenUpdates", "a new provider token %d s after the previous one on this connection (Apple: ≥ 20 min)" % (now - previous[1]))
    if previous is None or previous[0] != jwt:
        connection["token"] = (jwt, now)
        with state.lock:
            state.seen_ids.add(jwt)
    fields["claims"] = claims
    fields["jwt_header"] = header
    if headers.get("apns-topic") != APNS_TOPIC:
        raise Rejected(400, "BadTopic", "apns-topic must be %s: %r" % (APNS_TOPIC, headers.get("apns-topic")))
    kind = headers.get("apns-push-type")
    if kind not in ("alert", "background"):
        raise Rejected(400, "InvalidPushType", "apns-push-type must be alert or background for a wake-up: %r" % kind)
    priority = headers.get("apns-priority")
    if priority != ("10" if kind == "alert" else "5"):
        raise Rejected(400, "BadPriority", "apns-priority %r with push type %s (background MUST use 5; alert here 10)" % (priority, kind))
    expiration = headers.get("apns-expiration")
    if expiration is None or not re.fullmatch(r"[0-9]+", expiration):
        raise Rejected(400, "BadExpirationDate", "apns-expiration missing or not a number: %r" % expiration)
    if not now < int(expiration) <= now + 86400 + 60:
        raise Rejected(400, "BadExpirationDate", "apns-expiration is not within the next day: %s" % expiration)
    collapse = headers.get("apns-collapse-id")
    if collapse is not None and len(collapse.encode()) > 64:
        raise Rejected(400, "BadCollapseId", "apns-collapse-id is longer than 64 bytes")
    try:
        payload = json.loads(body)
    except ValueError:
        raise Rejected(400, "PayloadEmpty" if not body else "BadPayload", "the body is not JSON")
    tag = payload.get("mailslot") if isinstance(payload, dict) else None
    if not isinstance(tag, str) or not TAG.fullmatch(tag):
        raise Rejected(400, "BadPayload", "the payload has no tag under \"mailslot\"")
    if kind == "alert":
        expected = {"aps": {"alert": {"loc-key": "mailslot.wake"}, "mutable-content": 1}, "mailslot": tag}
        if collapse != ("mailslot-" + tag if tag else "mailslot"):
            raise Rejected(400, "BadCollapseId", "apns-collapse-id must be mailslot-<tag>: %r" % collapse)
    else:
        expected = {"aps": {"content-available": 1}, "mailslot": tag}
    if payload != expected:
        raise Rejected(400, "BadPayload", "the payload is not spec/push.md's %s payload: %s" % (kind, body.decode(errors="replace")))
    fields.update({"tag": tag, "push_type": kind, "priority": priority, "collapse_id": collapse, "expiration": int(expiration)})
    return fields


def check_oauth(keys, method, headers, body, token_url):
    fields = {}
    if method != "POST":
        raise Rejected(405, "invalid_request", "the token endpoint takes POST")
    if (headers.get("content-type") or "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise Rejected(400, "invalid_request", "content-type must be application/x-www-form-urlencoded")
    form = urllib.parse.parse_qs(body.decode(errors="replace"), keep_blank_values=True, strict_parsing=False)
    if set(form) != {"grant_type", "assertion"} or any(len(v) != 1 for v in form.values()):
        raise Rejected(400, "invalid_request", "the form must be exactly grant_type and assertion: %s" % sorted(form))
    if form["grant_type"][0] != JWT_BEARER:
        raise Rejected(400, "unsupported_grant_type", "grant_type must be %s" % JWT_BEARER)
    try:
        header, claims, signature, signed = split_jwt(form["assertion"][0])
    except Exception as error:
        raise Rejected(400, "invalid_grant", "the assertion is malformed: %s" % error)
    if header.get("alg") != "RS256" or header.get("kid") not in (None, keys.account["private_key_id"]):
        raise Rejected(400, "invalid_grant", "header must be alg RS256 with the key's kid: %r" % header)
    try:
        keys.account_public.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise Rejected(400, "invalid_grant", "the RS256 signature does not verify with the service account's key")
    now = time.time()
    if claims.get("iss") != keys.account["client_email"]:
        raise Rejected(400, "invalid_grant", "iss must be the client_email: %r" % claims.get("iss"))
    if claims.get("scope") != FCM_SCOPE:
        raise Rejected(400, "invalid_scope", "scope must be %s: %r" % (FCM_SCOPE, claims.get("scope")))
    if claims.get("aud") != token_url:
        raise Rejected(400, "invalid_grant", "aud must be the token URL %s: %r" % (token_url, claims.get("aud")))
    iat, exp = claims.get("iat"), claims.get("exp")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (iat, exp)):
        raise Rejected(400, "invalid_grant", "iat and exp must be integers")
    if abs(iat - now) > 300 or exp <= now or exp - iat > 3600:
        raise Rejected(400, "invalid_grant", "Invalid JWT: iat/exp (iat %d s off, exp - iat = %d, at most 3600)" % (iat - now, exp - iat))
    fields["claims"] = claims
    fields["jwt_header"] = header
    return fields


FCM_ERRORS = {
    400: ("INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    401: ("UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR"),
    403: ("PERMISSION_DENIED", "SENDER_ID_MISMATCH"),
    404: ("NOT_FOUND", "UNREGISTERED"),
    429: ("RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"),
    500: ("INTERNAL", "INTERNAL"),
    503: ("UNAVAILABLE", "UNAVAILABLE"),
}


def check_fcm(keys, method, path, headers, body):
    fields = {}
    if method != "POST":
        raise Rejected(405, "INVALID_ARGUMENT", "messages:send takes POST")
    if path != "/v1/projects/%s/messages:send" % keys.account["project_id"]:
        raise Rejected(404, "NOT_FOUND", "the path is not /v1/projects/%s/messages:send: %s" % (keys.account["project_id"], path))
    authorization = headers.get("authorization", "")
    if not authorization.startswith("Bearer "):
        raise Rejected(401, "UNAUTHENTICATED", "authorization is not 'Bearer <access token>'")
    with keys.lock:
        expiry = keys.tokens.get(authorization[len("Bearer "):])
    if expiry is None:
        raise Rejected(401, "UNAUTHENTICATED", "the access token was not issued by the token endpoint")
    if expiry <= time.time():
        raise Rejected(401, "UNAUTHENTICATED", "the access token expired")
    if (headers.get("content-type") or "").split(";")[0].strip() != "application/json":
        raise Rejected(400, "INVALID_ARGUMENT", "content-type must be application/json")
    try:
        request = json.loads(body)
    except ValueError:
        raise Rejected(400, "INVALID_ARGUMENT", "the body is not JSON")
    message = request.get("message") if isinstance(request, dict) else None
    if not isinstance(message, dict) or set(request) != {"message"}:
        raise Rejected(400, "INVALID_ARGUMENT", "the body must be {\"message\":{…}}")
    if "notification" in message:
        raise Rejected(400, "INVALID_ARGUMENT", "a wake-up is data-only: no notification block (spec/push.md)")
    token = message.get("token")
    data = message.get("data")
    tag = data.get("mailslot") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise Rejected(400, "INVALID_ARGUMENT", "message.token missing")
    if not isinstance(tag, str) or not TAG.fullmatch(tag) or set(data) != {"mailslot"}:
        raise Rejected(400, "INVALID_ARGUMENT", "message.data must be exactly {\"mailslot\": tag}")
    expected = {
        "token": token,
        "data": {"mailslot": tag},
        "android": {"collapse_key": "mailslot-" + tag if tag else "mailslot", "priority": "HIGH", "ttl": "86400s"},
    }
    if message != expected:
        raise Rejected(400, "INVALID_ARGUMENT", "the message is not spec/push.md's: %s" % body.decode(errors="replace"))
    fields.update({"token": token, "tag": tag, "android": message["android"]})
    return fields


def check_webhook(keys, state, method, headers, body):
    fields = {}
    if method != "POST":
        raise Rejected(405, None, "a webhook is a POST")
    if (headers.get("content-type") or "").split(";")[0].strip() != "application/json":
        raise Rejected(400, None, "content-type must be application/json")
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signature = headers.get("webhook-signature")
    if not msg_id or not timestamp or not signature:
        raise Rejected(400, None, "webhook-id, webhook-timestamp and webhook-signature are required (Standard Webhooks 1.0)")
    if not re.fullmatch(r"[0-9]+", timestamp):
        raise Rejected(400, None, "webhook-timestamp is not Unix seconds: %r" % timestamp)
    skew = int(timestamp) - time.time()
    if abs(skew) > 300:
        raise Rejected(401, None, "webhook-timestamp is %d s off (the window is 5 minutes)" % skew)
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    matched = []
    for entry in signature.split(" "):
        version, _, value = entry.partition(",")
        if version != "v1":
            continue  # other schemes are ignored, as the spec says
        for index, key in enumerate(keys.webhook_keys):
            expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            if hmac.compare_digest(expected.encode(), value.encode()):
                matched.append(index)
    if not matched:
        raise Rejected(401, None, "no v1 signature matches any configured secret")
    fields["signed_by"] = sorted(set(matched))
    fields["signatures"] = len(signature.split(" "))
    try:
        payload = json.loads(body)
    except ValueError:
        raise Rejected(400, None, "the body is not JSON")
    if not isinstance(payload, dict) or payload.get("type") != "mailslot.wake":
        raise Rejected(400, None, "the body's type must be mailslot.wake")
    allowed = {"registration", "tag", "token", "type", "uid"}
    if set(payload) - allowed or not {"registration", "tag", "type", "uid"} <= set(payload):
        raise Rejected(400, None, "the body must have registration, tag, type, uid and maybe token: %s" % sorted(payload))
    if not TAG.fullmatch(payload.get("tag") or "") or not isinstance(payload.get("tag"), str):
        raise Rejected(400, None, "tag is not a tag")
    fields["canonical"] = body == json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    with state.lock:
        fields["duplicate"] = msg_id in state.seen_ids
        state.seen_ids.add(msg_id)
    fields.update({"webhook_id": msg_id, "timestamp": int(timestamp), "body": payload, "tag": payload["tag"]})
    return fields


# ----------------------------------------------------------------------------------------------
# HTTP/1.1 servers (Web Push, FCM + OAuth, webhook, control)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, role, standins, keys, tls_context=None):
        self.role = role
        self.standins = standins
        self.keys = keys
        self.tls_context = tls_context
        self.scheme = "https" if tls_context else "http"
        super().__init__((LOOPBACK, 0), Handler)

    def get_request(self):
        sock, address = super().get_request()
        if self.tls_context is not None:
            # Handshake in the handler's thread: a client that stalls it holds only that thread.
            sock = self.tls_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    @property
    def port(self):
        return self.server_address[1]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mailslot-standin"
    timeout = 30

    def log_message(self, *args):
        pass  # the log is /_log

    def answer(self, status, body=b"", content_type="application/json", extra=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)) if status != 204 else "0")
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def read_body(self):
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        if length > 1 << 20:
            raise ValueError("body too large")
        return self.rfile.read(length)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def control_route(self, name, action, method, body):
        standins = self.server.standins
        if name == "webpush" and action == "_subscribe" and method == "POST":
            options = json.loads(body or b"{}")
            return 200, subscribe(self.server.keys, options, standins)
        state = standins.get(name)
        if state is None:
            return 404, {"error": "no stand-in %r (webpush, apns, oauth, fcm, webhook)" % name}
        if action == "_control" and method == "POST":
            try:
                state.control(json.loads(body or b"{}"))
            except (ValueError, TypeError) as error:
                return 400, {"error": str(error)}
            return 200, state.state()
        if action == "_log" and method == "GET":
            return 200, state.log_lines()
        if action == "_state" and method == "GET":
            return 200, state.state()
        return 404, {"error": "unknown control route"}

    def dispatch(self, method):
        try:
            body = self.read_body()
        except ValueError as error:
            self.answer(400, {"error": str(error)})
            return
        path = urllib.parse.urlsplit(self.path).path
        role = self.server.role
        m = re.fullmatch(r"/(?:([a-z_]+)/)?(_control|_log|_state|_subscribe)", path)
        if role == "control" and path == "/_reset" and method == "POST":
            for state in self.server.standins.values():
                state.reset()
            self.answer(200, {"reset": sorted(self.server.standins)})
            return
        if m:
            name = m.group(1) or {"webpush": "webpush", "fcm": "fcm", "webhook": "webhook"}.get(role)
            if role != "control" and m.group(1) is not None:
                name = None  # NAME/_… only on the control port
            status, answer = self.control_route(name, m.group(2), method, body) if name else (404, {"error": "not here"})
            if isinstance(answer, str):
                self.answer(status, answer, content_type="application/x-ndjson")
            else:
                self.answer(status, answer)
            return
        if role == "control":
            self.answer(404, {"error": "the control port has only NAME/_control, NAME/_log, NAME/_state, webpush/_subscribe, _reset"})
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        if role == "webpush":
            self.web_push(method, path, headers, body)
        elif role == "fcm":
            self.fcm(method, path, headers, body)
        elif role == "webhook":
            self.webhook(method, headers, body)

    def finish_request(self, state, fields, status, answer, extra=()):
        fields["status"] = status
        state.record(fields)
        self.answer(status, answer, extra=extra)

    def scripted(self, state, fields):
        """The answer the tests asked for, after the checks passed; None → the provider's success."""
        decision, released = state.decide()
        if decision == "hang":
            fields["hung"] = True
            fields["ok"] = True
            fields["status"] = None
            state.record(fields)
            state.hold(released, gone=lambda: client_gone(self.connection))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return "hung"
        return decision

    def web_push(self, method, path, headers, body):
        state = self.server.standins["webpush"]
        state.enter()
        try:
            if re.fullmatch(r"/redirected/.*", path):
                # The target of the 302 the stand-in answers on command: reaching it is a failure.
                self.finish_request(state, {"ok": False, "path": path, "followed_redirect": True,
                                            "why": "a redirect was followed (spec/push.md: never)"}, 400, {"error": "redirect followed"})
                return
            try:
                fields = check_web_push(self.server.keys, method, path, headers, body, self.server.scheme)
            except Rejected as rejected:
                self.finish_request(state, {"ok": False, "path": path, "why": rejected.why, "check": rejected.reason},
                                    rejected.status, {"reason": rejected.reason, "why": rejected.why})
                return
            fields.update({"ok": True, "scheme": self.server.scheme, "host": headers.get("host")})
            decision = self.scripted(state, fields)
            if decision == "hung":
                return
            if decision is None:
                self.finish_request(state, fields, 201, b"", extra=[("Location", "/message/" + secrets.token_urlsafe(12))])
                return
            status = decision["status"]
            extra = []
            if status == 429:
                extra.append(("Retry-After", str(decision.get("retry_after", 60))))
            if 300 <= status < 400:
                extra.append(("Location", "%s://%s/redirected/%s" % (self.server.scheme, headers.get("host"), fields["subscription"])))
            self.finish_request(state, fields, status, {"reason": decision.get("reason", "scripted %d" % status)}, extra=extra)
        finally:
            state.leave()

    def fcm(self, method, path, headers, body):
        keys = self.server.keys
        if path == "/token":
            state = self.server.standins["oauth"]
            state.enter()
            try:
                token_url = "https://%s/token" % headers.get("host")
                try:
                    fields = check_oauth(keys, method, headers, body, token_url)
                except Rejected as rejected:
                    self.finish_request(state, {"ok": False, "why": rejected.why}, rejected.status,
                                        {"error": rejected.reason, "error_description": rejected.why})
                    return
                fields["ok"] = True
                decision = self.scripted(state, fields)
                if decision == "hung":
                    return
                if decision is not None:
                    status = decision["status"]
                    self.finish_request(state, fields, status, {"error": decision.get("reason", "invalid_grant"),
                                                                "error_description": "scripted by the test"})
                    return
                token = "ya29.standin-" + secrets.token_urlsafe(24)
                with keys.lock:
                    keys.tokens[token] = time.time() + 3599
                fields["issued"] = token[:16] + "…"
                self.finish_request(state, fields, 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
            finally:
                state.leave()
            return
        state = self.server.standins["fcm"]
        state.enter()
        try:
            try:
                fields = check_fcm(keys, method, path, headers, body)
            except Rejected as rejected:
                self.finish_request(state, {"ok": False, "path": path, "why": rejected.why}, rejected.status,
                                    fcm_error(rejected.status, rejected.reason, rejected.why))
                return
            fields["ok"] = True
            decision = self.scripted(state, fields)
            if decision == "hung":
                return
            if decision is None:
                name = "projects/%s/messages/%d" % (keys.account["project_id"], secrets.randbelow(10**16))
                self.finish_request(state, fields, 200, {"name": name})
                return
            status = decision["status"]
            extra = [("Retry-After", str(decision["retry_after"]))] if "retry_after" in decision else []
            if status == 429 and not extra:
                extra = [("Retry-After", "60")]
            code = decision.get("reason") or FCM_ERRORS.get(status, ("INTERNAL", "INTERNAL"))[1]
            self.finish_request(state, fields, status, fcm_error(status, code, "scripted by the test"), extra=extra)
        finally:
            state.leave()

    def webhook(self, method, headers, body):
        state = self.server.standins["webhook"]
        state.enter()
        try:
            try:
                fields = check_webhook(self.server.keys, state, method, headers, body)
            except Rejected as rejected:
                self.finish_request(state, {"ok": False, "why": rejected.why}, rejected.status, {"why": rejected.why})
                return
            fields["ok"] = True
            decision = self.scripted(state, fields)
            if decision == "hung":
                return
            if decision is None:
                self.finish_request(state, fields, 204, b"")
                return
            status = decision["status"]
            extra = [("Retry-After", str(decision.get("retry_after", 60)))] if status == 429 else []
            self.finish_request(state, fields, status, {"reason": decision.get("reason", "scripted %d" % status)}, extra=extra)
        finally:
            state.leave()


def client_gone(sock):
    """Whether the client of a hung HTTP/1.1 request closed its connection: nothing more is sent on
    it while the answer is awaited, so readable means EOF (or a TLS close_notify)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    if isinstance(sock, ssl.SSLSocket):
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def fcm_error(status, code, message):
    status_name = FCM_ERRORS.get(status, ("INTERNAL", code))[0]
    return {"error": {"code": status, "message": message, "status": status_name,
                      "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]}}


def subscribe(keys, options, standins):
    """A test subscription: the user agent's P-256 key and auth secret, kept to decrypt with."""
    if not isinstance(options, dict) or set(options) - {"host", "tls"}:
        raise ValueError("subscribe takes {\"host\"?, \"tls\"?}")
    private_key = ec.generate_private_key(ec.SECP256R1())
    auth = secrets.token_bytes(16)
    sid = secrets.token_urlsafe(16)
    with keys.lock:
        keys.subscriptions[sid] = (private_key, auth)
    tls = bool(options.get("tls"))
    port = standins.ports["webpush_tls" if tls else "webpush"]
    host = options.get("host", LOOPBACK)
    point = private_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return {"id": sid, "endpoint": "%s://%s:%d/push/%s" % ("https" if tls else "http", host, port, sid),
            "p256dh": b64url(point), "auth": b64url(auth)}


# ----------------------------------------------------------------------------------------------
# APNs: HTTP/2 over TLS with the h2 library


class APNsServer(threading.Thread):
    def __init__(self, state, keys, tls_context, sandbox):
        super().__init__(daemon=True)
        self.state = state
        self.keys = keys
        self.tls_context = tls_context
        self.sandbox = sandbox
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def run(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, raw):
        try:
            conn_sock = self.tls_context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        if conn_sock.selected_alpn_protocol() != "h2":
            # APNs speaks only HTTP/2: a client that did not negotiate h2 is refused.
            self.state.record({"ok": False, "why": "ALPN did not select h2 (APNs requires HTTP/2)"})
            conn_sock.close()
            return
        connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        connection.initiate_connection()
        lock = threading.Lock()
        per_connection = {}
        streams = {}
        abandoned = set()       # streams the client reset (its call timed out)
        closed = []             # non-empty once the connection is gone

        def send():
            with lock:
                data = connection.data_to_send()
            if data:
                conn_sock.sendall(data)

        def respond(stream_id, status, body, extra=()):
            headers = [(":status", str(status)), ("apns-id", str(secrets.token_hex(16)))] + list(extra)
            if body:
                headers.append(("content-type", "application/json"))
                headers.append(("content-length", str(len(body))))
            with lock:
                try:
                    connection.send_headers(stream_id, headers, end_stream=not body)
                    if body:
                        connection.send_data(stream_id, body, end_stream=True)
                except Exception:
                    return
            send()

        def handle(stream_id, headers, body):
            state = self.state
            state.enter()
            try:
                try:
                    fields = check_apns(self.keys, state, headers, body, self.sandbox, per_connection)
                except Rejected as rejected:
                    state.record({"ok": False, "sandbox": self.sandbox, "why": rejected.why, "status": rejected.status, "reason": rejected.reason})
                    respond(stream_id, rejected.status, json.dumps({"reason": rejected.reason, "why": rejected.why}).encode())
                    return
                fields["ok"] = True
                decision, released = state.decide()
                if decision == "hang":
                    fields.update({"hung": True, "status": None})
                    state.record(fields)
                    state.hold(released, gone=lambda: stream_id in abandoned or bool(closed))
                    return  # never answered; the stream stays open until the client gives up
                if decision is None:
                    fields["status"] = 200
                    state.record(fields)
                    respond(stream_id, 200, b"")
                    return
                status = decision["status"]
                default = {400: "BadDeviceToken", 403: "ExpiredProviderToken", 410: "Unregistered",
                           429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}
                reason = decision.get("reason", default.get(status, "InternalServerError"))
                answer = {"reason": reason}
                if status == 410:
                    answer["timestamp"] = int(time.time() * 1000)
                extra = [("retry-after", str(decision["retry_after"]))] if "retry_after" in decision else []
                fields.update({"status": status, "reason": reason})
                state.record(fields)
                respond(stream_id, status, json.dumps(answer).encode(), extra)
            finally:
                state.leave()

        try:
            send()
            conn_sock.settimeout(300)
            while True:
                data = conn_sock.recv(65536)
                if not data:
                    break
                with lock:
                    events = connection.receive_data(data)
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        streams[event.stream_id] = [dict(event.headers), b""]
                        if event.stream_ended:
                            headers, body = streams.pop(event.stream_id)
                            threading.Thread(target=handle, args=(event.stream_id, headers, body), daemon=True).start()
                    elif isinstance(event, h2.events.DataReceived):
                        if event.stream_id in streams:
                            streams[event.stream_id][1] += event.data
                        with lock:
                            connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        if event.stream_id in streams:
                            headers, body = streams.pop(event.stream_id)
                            threading.Thread(target=handle, args=(event.stream_id, headers, body), daemon=True).start()
                    elif isinstance(event, h2.events.StreamReset):
                        abandoned.add(event.stream_id)
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        return
                send()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            closed.append(True)
            try:
                conn_sock.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------------------------


class StandIns(dict):
    ports = {}


def tls_context(folder, alpn):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(os.path.join(folder, "server.pem"), os.path.join(folder, "server-key.pem"))
    context.set_alpn_protocols(alpn)
    return context


def serve(folder):
    keys = Keys(folder)
    standins = StandIns({name: StandIn(name) for name in ("webpush", "apns", "oauth", "fcm", "webhook")})
    servers = {
        "webpush": Server("webpush", standins, keys),
        "webpush_tls": Server("webpush", standins, keys, tls_context(folder, ["http/1.1"])),
        "fcm": Server("fcm", standins, keys, tls_context(folder, ["http/1.1"])),
        "webhook": Server("webhook", standins, keys),
        "control": Server("control", standins, keys),
    }
    apns = {
        "apns": APNsServer(standins["apns"], keys, tls_context(folder, ["h2"]), sandbox=False),
        "apns_sandbox": APNsServer(standins["apns"], keys, tls_context(folder, ["h2"]), sandbox=True),
    }
    ports = {name: server.port for name, server in servers.items()}
    ports.update({name: server.port for name, server in apns.items()})
    standins.ports = ports

    # Google's JSON names its token endpoint: point it at the stand-in.
    account_path = os.path.join(folder, "fcm-service-account.json")
    keys.account["token_uri"] = "https://%s:%d/token" % (LOOPBACK, ports["fcm"])
    write_json_atomically(account_path, keys.account)

    base = lambda scheme, name: "%s://%s:%d" % (scheme, LOOPBACK, ports[name])
    arguments = [
        "--push-allow-private-addresses", "true",
        "--push-ca-file", os.path.join(folder, "ca.pem"),
        "--vapid-key", os.path.join(folder, "vapid.pem"),
        "--vapid-subject", VAPID_SUBJECT,
        "--apns-key", os.path.join(folder, "apns.p8"),
        "--apns-key-id", APNS_KEY_ID,
        "--apns-team-id", APNS_TEAM_ID,
        "--apns-topic", APNS_TOPIC,
        "--apns-url", base("https", "apns"),
        "--apns-sandbox-url", base("https", "apns_sandbox"),
        "--fcm-service-account", account_path,
        "--fcm-url", base("https", "fcm"),
        "--fcm-token-url", keys.account["token_uri"],
        "--webhook-url", base("http", "webhook") + "/hooks/mailslot",
        "--webhook-secret-file", os.path.join(folder, "webhook-secrets"),
    ]
    write_json_atomically(os.path.join(folder, "relay-arguments.json"), arguments)
    write_json_atomically(os.path.join(folder, "standins.json"), {
        "vapid_public_key": keys.vapid_public,
        "vapid_subject": VAPID_SUBJECT,
        "apns_key_id": APNS_KEY_ID,
        "apns_team_id": APNS_TEAM_ID,
        "apns_topic": APNS_TOPIC,
        "fcm_project_id": keys.account["project_id"],
        "control": base("http", "control"),
    })
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    for server in apns.values():
        server.start()
    # Last: ports.json's existence tells tools/push that everything listens.
    write_json_atomically(os.path.join(folder, "ports.json"), ports)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(1):
        if os.getppid() == 1:
            break  # tools/push is gone without stopping us: do not outlive it
    for state in standins.values():
        state.control({"hang": False})


def main(argv):
    if len(argv) != 3 or argv[1] not in ("keygen", "serve"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if argv[1] == "keygen":
        keygen(argv[2])
    else:
        serve(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
