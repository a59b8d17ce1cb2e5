#!/usr/bin/env python3
"""tools/push self-test, run inside `tools/push run`: every stand-in accepts a request built as its
provider documents it (built here independently of the relay: RFC 8291 encryption written from the
RFC with `cryptography`, VAPID signed with py_vapid, JWTs signed by hand) and refuses altered ones,
each refusal saying why; the control commands do what they say. Exits 1 at the first failure."""

import base64
import hashlib
import hmac
import http.client
import json
import os
import socket
import ssl
import sys
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events
import py_vapid
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

DIR = os.environ["MAILSLOT_TEST_PUSH_DIR"]
PORTS = json.load(open(os.path.join(DIR, "ports.json")))
INFO = json.load(open(os.path.join(DIR, "standins.json")))
ARGS = json.load(open(os.path.join(DIR, "relay-arguments.json")))
CA = ssl.create_default_context(cafile=os.path.join(DIR, "ca.pem"))
checks = 0


def fail(message):
    print("self-test: FAIL: %s" % message, file=sys.stderr)
    sys.exit(1)


def expect(condition, message):
    global checks
    checks += 1
    if not condition:
        fail(message)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def request(port, method, path, body=b"", headers=None, tls=False, timeout=10):
    if tls:
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=CA, timeout=timeout)
    else:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    data = answer.read()
    connection.close()
    return answer.status, dict((k.lower(), v) for k, v in answer.getheaders()), data


def control(name, command):
    status, _, body = request(PORTS["control"], "POST", "/%s/_control" % name, json.dumps(command).encode())
    expect(status == 200, "control %s %s answered %d %s" % (name, command, status, body))


def log(name):
    status, _, body = request(PORTS["control"], "GET", "/%s/_log" % name)
    expect(status == 200, "GET %s/_log answered %d" % (name, status))
    return [json.loads(line) for line in body.decode().splitlines()]


def state(name):
    return json.loads(request(PORTS["control"], "GET", "/%s/_state" % name)[2])


# ------------------------------------------------------------------------------------------- Web Push


def hkdf(salt, ikm, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def web_push_body(tag, p256dh, auth):
    """RFC 8291 §3–4 over RFC 8188, one record of 64 padded bytes: spec/push.md's 166-byte body."""
    ua_public = unb64url(p256dh)
    ua = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), ua_public)
    sender = ec.generate_private_key(ec.SECP256R1())
    as_public = sender.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    shared = sender.exchange(ec.ECDH(), ua)
    ikm = hkdf(unb64url(auth), shared, b"WebPush: info\x00" + ua_public + as_public, 32)
    salt = os.urandom(16)
    cek = hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    plaintext = tag.encode() + b"\x02" + b"\x00" * (63 - len(tag))
    return salt + (4096).to_bytes(4, "big") + bytes([65]) + as_public + AESGCM(cek).encrypt(nonce, plaintext, None)


def vapid_header(aud, exp=None, sub=None, key=None):
    vapid = key or py_vapid.Vapid02.from_file(os.path.join(DIR, "vapid.pem"))
    claims = {"aud": aud, "exp": exp if exp is not None else int(time.time()) + 12 * 3600, "sub": sub or INFO["vapid_subject"]}
    return vapid.sign(claims)["Authorization"]


def subscribe(tls=False):
    status, _, body = request(PORTS["control"], "POST", "/webpush/_subscribe", json.dumps({"tls": tls}).encode())
    expect(status == 200, "subscribe answered %d" % status)
    return json.loads(body)


def push(sub, body=None, tag="k3J9vQ0aZx", drop=(), change=None, aud=None, tls=False, timeout=10):
    url = urllib.parse.urlsplit(sub["endpoint"])
    headers = {
        "TTL": "86400", "Urgency": "high", "Topic": "mailslot-wake", "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "Authorization": vapid_header(aud or "%s://%s" % (url.scheme, url.netloc)),
    }
    headers.update(change or {})
    for name in drop:
        headers.pop(name)
    body = body if body is not None else web_push_body(tag, sub["p256dh"], sub["auth"])
    return request(url.port, "POST", url.path, body, headers, tls=tls, timeout=timeout)


def why(body):
    try:
        return json.loads(body).get("why") or json.loads(body).get("error_description") or ""
    except ValueError:
        return ""


def test_web_push():
    sub = subscribe()
    status, _, _ = push(sub)
    expect(status == 201, "a correct Web Push request answered %d" % status)
    entry = log("webpush")[-1]
    expect(entry["ok"] and entry["tag"] == "k3J9vQ0aZx" and entry["body_length"] == 166, "the log does not show the decrypted tag: %s" % entry)
    expect(entry["claims"]["sub"] == INFO["vapid_subject"], "the log lacks the VAPID claims")
    for tag in ("", "Z" * 48):
        status, _, body = push(sub, tag=tag)
        expect(status == 201 and log("webpush")[-1]["tag"] == tag, "tag %r: %d %s" % (tag, status, body))

    refusals = [
        ("no TTL", dict(drop=("TTL",)), 400, "TTL"),
        ("Urgency urgent", dict(change={"Urgency": "urgent"}), 400, "Urgency"),
        ("a 33-character Topic", dict(change={"Topic": "a" * 33}), 400, "Topic"),
        ("Content-Encoding aesgcm", dict(change={"Content-Encoding": "aesgcm"}), 400, "aes128gcm"),
        ("no Authorization", dict(drop=("Authorization",)), 401, "VAPID"),
        ("another aud", dict(aud="http://127.0.0.1:1"), 403, "aud"),
        ("a space after the comma", dict(change={"Authorization": vapid_header("http://127.0.0.1:%d" % PORTS["webpush"]).replace(",k=", ", k=")}), 401, "py_vapid"),
        ("exp 25 h ahead", dict(change={"Authorization": vapid_header("http://127.0.0.1:%d" % PORTS["webpush"], exp=int(time.time()) + 25 * 3600)}), 403, "24 hours"),
        ("exp past", dict(change={"Authorization": vapid_header("http://127.0.0.1:%d" % PORTS["webpush"], exp=int(time.time()) - 10)}), 403, "expired"),
        ("another sub", dict(change={"Authorization": vapid_header("http://127.0.0.1:%d" % PORTS["webpush"], sub="mailto:x@example.com")}), 403, "subject"),
        ("a 167-byte body", dict(body=web_push_body("abc", sub["p256dh"], sub["auth"]) + b"\x00"), 400, ""),
        ("the wrong auth secret", dict(body=web_push_body("abc", sub["p256dh"], b64url(os.urandom(16)))), 400, "decrypt"),
    ]
    other = py_vapid.Vapid02()
    other.generate_keys()
    refusals.append(("another VAPID key", dict(change={"Authorization": vapid_header("http://127.0.0.1:%d" % PORTS["webpush"], key=other)}), 403, "VAPID public key"))
    for name, arguments, want, words in refusals:
        status, _, body = push(sub, **arguments)
        expect(status == want, "%s: answered %d, not %d (%s)" % (name, status, want, body))
        entry = log("webpush")[-1]
        expect(not entry["ok"] and words in entry["why"] and words in why(body), "%s: the refusal does not say why (%s)" % (name, entry))

    status, _, _ = request(PORTS["webpush"], "POST", "/push/nosuchsubscription", b"", {"TTL": "60"})
    expect(status == 404, "an unknown subscription answered %d" % status)

    # TLS listener, the aud with https.
    sub_tls = subscribe(tls=True)
    status, _, body = push(sub_tls, tls=True)
    expect(status == 201, "Web Push over TLS answered %d %s" % (status, body))

    # Control: scripted answers, a redirect, a hang.
    control("webpush", {"next": [410, {"status": 429, "retry_after": 7}, 302, 500]})
    expect(push(sub)[0] == 410, "next 410 not answered")
    status, headers, _ = push(sub)
    expect(status == 429 and headers.get("retry-after") == "7", "next 429 with Retry-After 7: %d %s" % (status, headers))
    status, headers, _ = push(sub)
    expect(status == 302 and "/redirected/" in headers.get("location", ""), "next 302 has no Location to /redirected/")
    expect(push(sub)[0] == 500, "next 500 not answered")
    expect(push(sub)[0] == 201, "after the queue, not 201 again")
    control("webpush", {"status": 503, "for_seconds": 1.5})
    expect(push(sub)[0] == 503, "status 503 for 1.5 s not answered")
    time.sleep(1.6)
    expect(push(sub)[0] == 201, "status for_seconds did not end")
    control("webpush", {"hang": True})
    try:
        push(sub, timeout=1)
        fail("a hanging stand-in answered")
    except (socket.timeout, TimeoutError, http.client.HTTPException, ConnectionError):
        pass
    time.sleep(0.5)
    expect(state("webpush")["hanging"] == 0 and state("webpush")["max_hanging"] == 1,
           "a hung request whose client left is still counted, or never was: %s" % state("webpush"))
    # A client that stays: counted until the hang is released.
    connection = http.client.HTTPConnection("127.0.0.1", PORTS["webpush"], timeout=10)
    url = urllib.parse.urlsplit(sub["endpoint"])
    connection.request("POST", url.path, body=web_push_body("abc", sub["p256dh"], sub["auth"]), headers={
        "TTL": "60", "Content-Encoding": "aes128gcm", "Authorization": vapid_header("http://%s" % url.netloc)})
    deadline = time.time() + 5
    while state("webpush")["hanging"] != 1 and time.time() < deadline:
        time.sleep(0.05)
    expect(state("webpush")["hanging"] == 1, "a hung request is not counted: %s" % state("webpush"))
    control("webpush", {"hang": False})
    try:
        connection.getresponse()
    except (http.client.HTTPException, ConnectionError, socket.timeout):
        pass  # released: the connection is closed without an answer
    connection.close()
    time.sleep(0.3)
    expect(state("webpush")["hanging"] == 0, "released hang still counted")
    status, _, body = request(PORTS["control"], "POST", "/webpush/_control", json.dumps({"nope": 1}).encode())
    expect(status == 400 and b"unknown" in body, "an unknown control member was not refused")


# ------------------------------------------------------------------------------------------- JWTs


def jwt(header, claims, sign):
    signing_input = b64url(json.dumps(header, separators=(",", ":")).encode()) + "." + b64url(json.dumps(claims, separators=(",", ":")).encode())
    return signing_input + "." + b64url(sign(signing_input.encode()))


def es256(key):
    def sign(data):
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return sign


def apns_token(kid=None, iat=None, key=None):
    key = key or serialization.load_pem_private_key(open(os.path.join(DIR, "apns.p8"), "rb").read(), None)
    return jwt({"alg": "ES256", "kid": kid or INFO["apns_key_id"]}, {"iss": INFO["apns_team_id"], "iat": iat or int(time.time())}, es256(key))


class H2Client:
    def __init__(self, port):
        context = ssl.create_default_context(cafile=os.path.join(DIR, "ca.pem"))
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")
        expect(self.sock.selected_alpn_protocol() == "h2", "the APNs stand-in did not negotiate h2")
        self.connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.connection.initiate_connection()
        self.sock.sendall(self.connection.data_to_send())

    def post(self, path, headers, body):
        stream = self.connection.get_next_available_stream_id()
        self.connection.send_headers(stream, [(":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", path)] + list(headers.items()))
        self.connection.send_data(stream, body, end_stream=True)
        self.sock.sendall(self.connection.data_to_send())
        status, answer = None, b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                fail("the APNs stand-in closed the connection")
            for event in self.connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                    answer += event.data
                    self.connection.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    self.sock.sendall(self.connection.data_to_send())
                    return status, answer
            self.sock.sendall(self.connection.data_to_send())


def apns_request(token, kind="alert", tag="k3J9vQ0aZx", change=None, drop=()):
    headers = {
        "authorization": "bearer " + token, "apns-topic": INFO["apns_topic"], "apns-push-type": kind,
        "apns-priority": "10" if kind == "alert" else "5", "apns-expiration": str(int(time.time()) + 86400),
        "content-type": "application/json",
    }
    if kind == "alert":
        headers["apns-collapse-id"] = "mailslot-" + tag if tag else "mailslot"
        body = {"aps": {"alert": {"loc-key": "mailslot.wake"}, "mutable-content": 1}, "mailslot": tag}
    else:
        body = {"aps": {"content-available": 1}, "mailslot": tag}
    headers.update(change or {})
    for name in drop:
        headers.pop(name)
    return headers, json.dumps(body, separators=(",", ":")).encode()


def test_apns():
    device = "ab" * 32
    token = apns_token()
    client = H2Client(PORTS["apns"])
    status, _ = client.post("/3/device/" + device, *apns_request(token))
    expect(status == 200, "a correct APNs alert answered %s" % status)
    entry = log("apns")[-1]
    expect(entry["ok"] and entry["tag"] == "k3J9vQ0aZx" and entry["token"] == device and not entry["sandbox"], "APNs log: %s" % entry)
    status, _ = client.post("/3/device/" + device, *apns_request(token, kind="background", tag=""))
    expect(status == 200, "a correct APNs background push answered %s" % status)
    refusals = [
        ("background at priority 10", apns_request(token, kind="background", change={"apns-priority": "10"}), 400, "BadPriority"),
        ("another topic", apns_request(token, change={"apns-topic": "com.example.other"}), 400, "BadTopic"),
        ("no expiration", apns_request(token, drop=("apns-expiration",)), 400, "BadExpirationDate"),
        ("a wrong collapse id", apns_request(token, change={"apns-collapse-id": "x"}), 400, "BadCollapseId"),
        ("another kid", apns_request(apns_token(kid="OTHERKEYID")), 403, "InvalidProviderToken"),
        ("an old token", apns_request(apns_token(iat=int(time.time()) - 7200)), 403, "ExpiredProviderToken"),
        ("another key", apns_request(apns_token(key=ec.generate_private_key(ec.SECP256R1()))), 403, "InvalidProviderToken"),
    ]
    for name, (headers, body), want, reason in refusals:
        status, answer = H2Client(PORTS["apns"]).post("/3/device/" + device, headers, body)
        expect(status == want and json.loads(answer)["reason"] == reason and json.loads(answer)["why"], "%s: %s %s" % (name, status, answer))
    expect(state("apns")["distinct_ids"] >= 1, "distinct provider tokens are not counted")
    # Apple: a provider token changed within 20 minutes on one connection.
    status, answer = client.post("/3/device/" + device, *apns_request(apns_token(iat=int(time.time()) - 1)))
    expect(status == 429 and b"TooManyProviderTokenUpdates" in answer, "a new token on the connection at once: %s %s" % (status, answer))
    control("apns", {"next": [410, {"status": 429, "retry_after": 9}]})
    status, answer = client.post("/3/device/" + device, *apns_request(token))
    expect(status == 410 and json.loads(answer)["reason"] == "Unregistered" and "timestamp" in json.loads(answer), "next 410: %s %s" % (status, answer))
    status, answer = client.post("/3/device/" + device, *apns_request(token))
    expect(status == 429 and json.loads(answer)["reason"] == "TooManyRequests", "next 429: %s" % status)
    status, _ = H2Client(PORTS["apns_sandbox"]).post("/3/device/" + device, *apns_request(token))
    expect(status == 200 and log("apns")[-1]["sandbox"], "the sandbox listener does not log sandbox")
    # A hang: counted while the client keeps the connection, not after it closed it.
    control("apns", {"hang": True})
    hung = H2Client(PORTS["apns"])
    headers, body = apns_request(apns_token())
    stream = hung.connection.get_next_available_stream_id()
    hung.connection.send_headers(stream, [(":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"),
                                          (":path", "/3/device/" + device)] + list(headers.items()))
    hung.connection.send_data(stream, body, end_stream=True)
    hung.sock.sendall(hung.connection.data_to_send())
    deadline = time.time() + 5
    while state("apns")["hanging"] != 1 and time.time() < deadline:
        time.sleep(0.05)
    expect(state("apns")["hanging"] == 1, "a hung APNs request is not counted: %s" % state("apns"))
    hung.sock.close()
    time.sleep(0.5)
    expect(state("apns")["hanging"] == 0, "a hung APNs request whose client left is still counted")
    control("apns", {"hang": False})


# ------------------------------------------------------------------------------------------- FCM


def assertion(aud=None, scope=None, exp_after=3600, key=None):
    account = json.load(open(os.path.join(DIR, "fcm-service-account.json")))
    key = key or serialization.load_pem_private_key(account["private_key"].encode(), None)
    now = int(time.time())
    claims = {"aud": aud or account["token_uri"], "exp": now + exp_after, "iat": now, "iss": account["client_email"],
              "scope": scope or "https://www.googleapis.com/auth/firebase.messaging"}
    return jwt({"alg": "RS256", "kid": account["private_key_id"], "typ": "JWT"}, claims,
               lambda data: key.sign(data, padding.PKCS1v15(), hashes.SHA256()))


def oauth(token):
    body = urllib.parse.urlencode({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": token}).encode()
    return request(PORTS["fcm"], "POST", "/token", body, {"Content-Type": "application/x-www-form-urlencoded"}, tls=True)


def fcm_send(access, message):
    return request(PORTS["fcm"], "POST", "/v1/projects/%s/messages:send" % INFO["fcm_project_id"], json.dumps({"message": message}).encode(),
                   {"Authorization": "Bearer " + access, "Content-Type": "application/json; charset=utf-8"}, tls=True)


def test_fcm():
    account = json.load(open(os.path.join(DIR, "fcm-service-account.json")))
    expect(account["token_uri"] == "https://127.0.0.1:%d/token" % PORTS["fcm"], "token_uri does not point at the stand-in")
    status, _, body = oauth(assertion())
    expect(status == 200, "a correct assertion answered %d %s" % (status, body))
    access = json.loads(body)
    expect(access["token_type"] == "Bearer" and access["expires_in"] == 3599, "token answer: %s" % access)
    for name, token, words in [
        ("another aud", assertion(aud="https://oauth2.googleapis.com/token"), "aud"),
        ("another scope", assertion(scope="https://www.googleapis.com/auth/cloud-platform"), "scope"),
        ("exp - iat over 3600", assertion(exp_after=7200), "3600"),
        ("another key", assertion(key=__import__("cryptography.hazmat.primitives.asymmetric.rsa", fromlist=["rsa"]).generate_private_key(public_exponent=65537, key_size=2048)), "RS256"),
    ]:
        status, _, body = oauth(token)
        expect(status == 400 and words in why(body), "%s: %d %s" % (name, status, body))
    tag = "aB3_-x"
    message = {"token": "fcm-token:abc", "data": {"mailslot": tag}, "android": {"collapse_key": "mailslot-" + tag, "priority": "HIGH", "ttl": "86400s"}}
    status, _, body = fcm_send(access["access_token"], message)
    expect(status == 200 and json.loads(body)["name"].startswith("projects/%s/messages/" % INFO["fcm_project_id"]), "a correct send: %d %s" % (status, body))
    entry = log("fcm")[-1]
    expect(entry["ok"] and entry["tag"] == tag and entry["token"] == "fcm-token:abc", "FCM log: %s" % entry)
    status, _, body = fcm_send("ya29.not-issued", message)
    expect(status == 401 and b"not issued" in body, "an unknown access token: %d" % status)
    status, _, body = fcm_send(access["access_token"], dict(message, notification={"title": "x"}))
    expect(status == 400 and b"data-only" in body, "a notification block: %d %s" % (status, body))
    status, _, body = fcm_send(access["access_token"], dict(message, android=dict(message["android"], priority="NORMAL")))
    expect(status == 400, "priority NORMAL: %d" % status)
    control("fcm", {"next": [404, {"status": 429, "retry_after": 11}]})
    status, _, body = fcm_send(access["access_token"], message)
    expect(status == 404 and json.loads(body)["error"]["details"][0]["errorCode"] == "UNREGISTERED", "next 404: %s" % body)
    status, headers, body = fcm_send(access["access_token"], message)
    expect(status == 429 and headers.get("retry-after") == "11" and b"QUOTA_EXCEEDED" in body, "next 429: %d %s" % (status, headers))
    control("oauth", {"next": [400]})
    status, _, body = oauth(assertion())
    expect(status == 400 and json.loads(body)["error"] == "invalid_grant", "oauth next 400: %d %s" % (status, body))


# ------------------------------------------------------------------------------------------- webhook


def webhook(body, msg_id="msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", timestamp=None, secrets_used=(0, 1), tamper=False):
    keys = [base64.b64decode(line.strip()[6:]) for line in open(os.path.join(DIR, "webhook-secrets")) if line.strip()]
    timestamp = str(timestamp if timestamp is not None else int(time.time()))
    signed = ("%s.%s." % (msg_id, timestamp)).encode() + body
    signatures = " ".join("v1," + base64.b64encode(hmac.new(keys[i], signed, hashlib.sha256).digest()).decode() for i in secrets_used)
    if tamper:
        body = body.replace(b"bob", b"eve")
    url = [a for a in ARGS if "/hooks/" in a][0]
    return request(PORTS["webhook"], "POST", urllib.parse.urlsplit(url).path, body,
                   {"Content-Type": "application/json", "webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signatures})


def test_webhook():
    body = b'{"registration":"Hq2vX0Ck9m1Lr8sWbTn2pQ","tag":"k3J9vQ0aZx","token":"device-1","type":"mailslot.wake","uid":"bob"}'
    status, _, _ = webhook(body)
    expect(status == 204, "a correctly signed webhook answered %d" % status)
    entry = log("webhook")[-1]
    expect(entry["ok"] and entry["signed_by"] == [0, 1] and entry["canonical"] and not entry["duplicate"], "webhook log: %s" % entry)
    status, _, _ = webhook(body, secrets_used=(1,))
    expect(status == 204 and log("webhook")[-1]["duplicate"], "a second delivery of one id is not flagged")
    for name, arguments, words in [
        ("a tampered body", dict(tamper=True), "no v1 signature"),
        ("a timestamp 6 minutes old", dict(timestamp=int(time.time()) - 360), "5 minutes"),
    ]:
        status, _, answer = webhook(body, msg_id="msg_other", **arguments)
        expect(status == 401 and words in why(answer), "%s: %d %s" % (name, status, answer))
    status, _, answer = webhook(b'{"type":"other"}', msg_id="msg_third")
    expect(status == 400 and why(answer), "a foreign body: %d" % status)
    control("webhook", {"next": [410]})
    expect(webhook(body, msg_id="msg_fourth")[0] == 410, "next 410 not answered")


def main():
    expect(sorted(PORTS) == ["apns", "apns_sandbox", "control", "fcm", "webhook", "webpush", "webpush_tls"], "ports.json: %s" % PORTS)
    expect(len(set(PORTS.values())) == len(PORTS), "two stand-ins share a port")
    expect("--vapid-key" in ARGS and "--push-ca-file" in ARGS, "relay-arguments.json lacks settings")
    pem = open(os.path.join(DIR, "vapid.pem")).read()
    expect(pem.startswith("-----BEGIN PRIVATE KEY-----"), "py_vapid did not write PKCS#8 PEM")
    test_web_push()
    test_apns()
    test_fcm()
    test_webhook()
    request(PORTS["control"], "POST", "/_reset")
    expect(log("webpush") == [] and state("apns")["requests"] == 0, "_reset did not clear the logs")
    print("self-test: %d checks against the stand-ins passed" % checks, file=sys.stderr)


if __name__ == "__main__":
    main()
