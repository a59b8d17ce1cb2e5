"""spec/vectors/push.json, checked from spec/push.md alone with Mozilla's http_ece, py_vapid and
`cryptography` (issue 29; docs/design/wakeups.md §9.4). check.py calls check_push_vectors when
the file exists. Binary values are unpadded base64url; P-256 private keys are the 32-byte scalar,
public keys the 65-byte uncompressed point; RSA public keys are PEM.

Sections (the layout PushVectorTests writes; each optional: a missing one is reported, not failed):
  webpush_rfc8291   {ua_private, ua_public, as_private, as_public, auth, salt, record_size,
                    plaintext, body}: RFC 8291 Appendix A; the body must decrypt with http_ece to
                    the plaintext, and its header must carry salt, record_size and as_public
  webpush_payloads  {ua_private, ua_public, as_private, salt, body_bytes, cases: [{auth, tag, body,
                    opens, why?}]}: body_bytes-long bodies that decrypt to tag (opens false: must
                    not decrypt)
  vapid             {public_key, cases: [{authorization, endpoint_origin, now, expect, why}]}:
                    py_vapid verifies the signature, the RFC 8292 claims are checked by hand (aud is
                    the endpoint's origin, 0 < exp - now <= 24 h, sub mailto: or https:)
  apns_jwt          {public_key, key_id, team_id, now, jwt}: ES256, kid, iss, iat within 1 h
  oauth_assertion   {public_key_pem, header, claims, now, jwt, form_body}: the RS256 JWT verifies
                    and is exactly the header and claims texts given (PKCS#1 v1.5 is
                    deterministic); the form body is exact
  webhook           [{secrets, id, timestamp, body, signature}]: recomputed with hmac
"""
import base64, hashlib, hmac, json, urllib.parse

import http_ece
import py_vapid
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

WEB_PUSH_BODY = 166


def b64d(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def p256_private(scalar_b64):
    return ec.derive_private_key(int.from_bytes(b64d(scalar_b64), "big"), ec.SECP256R1())


def p256_public(point_b64):
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(point_b64))


def jwt_parts(token):
    head, claims, signature = token.split(".")
    return json.loads(b64d(head)), json.loads(b64d(claims)), b64d(signature), (head + "." + claims).encode()


def es256_ok(public_key, signature, signed):
    if len(signature) != 64:
        return False
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        public_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def decrypt(body, ua_private, auth):
    return http_ece.decrypt(body, private_key=p256_private(ua_private), auth_secret=b64d(auth), version="aes128gcm")


def vapid_outcome(vector, public_key):
    """'ok' or why not: py_vapid for the signature, the RFC 8292 claims by hand."""
    header = vector["authorization"]
    try:
        if not py_vapid.Vapid02.verify(header):
            return "signature"
    except Exception as error:
        return "malformed: %r" % error
    parts = dict(p.split("=", 1) for p in header.split(" ", 1)[1].split(","))
    if parts.get("k") != public_key:
        return "k"
    head, claims, _, _ = jwt_parts(parts["t"])
    now = vector["now"]
    if head.get("alg") != "ES256":
        return "alg"
    if claims.get("aud") != vector["endpoint_origin"]:
        return "aud"
    if not isinstance(claims.get("exp"), int) or not now < claims["exp"] <= now + 86400:
        return "exp"
    if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
        return "sub"
    return "ok"


def apns_outcome(vector):
    try:
        head, claims, signature, signed = jwt_parts(vector["jwt"])
    except Exception:
        return "malformed"
    if head.get("alg") != "ES256" or head.get("kid") != vector["key_id"]:
        return "header"
    if not es256_ok(p256_public(vector["public_key"]), signature, signed):
        return "signature"
    if claims.get("iss") != vector["team_id"]:
        return "iss"
    if not isinstance(claims.get("iat"), int) or abs(claims["iat"] - vector["now"]) > 3600:
        return "iat"
    return "ok"


def check_push_vectors(path, check):
    with open(path) as f:
        vectors = json.load(f)

    def section(name):
        if name not in vectors:
            print("note: push.json has no %s section" % name)
            return None
        return vectors[name]

    appendix = section("webpush_rfc8291")
    if appendix is not None:
        body = b64d(appendix["body"])
        try:
            plain = decrypt(body, appendix["ua_private"], appendix["auth"])
            check("push: RFC 8291 Appendix A decrypts with http_ece", plain == appendix["plaintext"].encode(), repr(plain))
        except Exception as error:
            check("push: RFC 8291 Appendix A decrypts with http_ece", False, repr(error))
        check("push: RFC 8291 Appendix A header (salt, rs, keyid = as_public)",
              body[:16] == b64d(appendix["salt"]) and int.from_bytes(body[16:20], "big") == appendix["record_size"]
              and body[21:21 + body[20]] == b64d(appendix["as_public"]))
        point = p256_private(appendix["ua_private"]).public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        check("push: RFC 8291 Appendix A ua_public is ua_private's", b64e(point) == appendix["ua_public"])

    payloads = section("webpush_payloads")
    for i, vector in enumerate((payloads or {}).get("cases", [])):
        body = b64d(vector["body"])
        name = "push: Web Push payload %d (tag %r)" % (i, vector.get("tag"))
        if vector["opens"]:
            check(name + " is %d bytes" % payloads["body_bytes"], len(body) == payloads["body_bytes"] == WEB_PUSH_BODY,
                  "%d bytes" % len(body))
            check(name + " header carries the salt", body[:16] == b64d(payloads["salt"]))
            try:
                plain = decrypt(body, payloads["ua_private"], vector["auth"])
                check(name + " decrypts to the tag and nothing else", plain == vector["tag"].encode(), repr(plain))
            except Exception as error:
                check(name + " decrypts", False, repr(error))
        else:
            try:
                decrypt(body, payloads["ua_private"], vector["auth"])
                check(name + " must not open", False, "it decrypted")
            except Exception:
                check(name + " must not open", True)

    vapid = section("vapid")
    for i, vector in enumerate((vapid or {}).get("cases", [])):
        got = vapid_outcome(vector, vapid["public_key"])
        want_ok = vector["expect"] == "valid"
        check("push: VAPID vector %d %s (%s)" % (i, "verifies" if want_ok else "is refused", vector["why"]), (got == "ok") == want_ok, got)

    apns = section("apns_jwt")
    if apns is not None:
        check("push: APNs JWT verifies", apns_outcome(apns) == "ok", apns_outcome(apns))

    oauth = section("oauth_assertion")
    if oauth is not None:
        key = serialization.load_pem_public_key(oauth["public_key_pem"].encode())
        head, claims, signature, signed = jwt_parts(oauth["jwt"])
        try:
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            verified = True
        except InvalidSignature:
            verified = False
        check("push: OAuth assertion RS256 verifies", verified)
        head_text, claims_text = (b64d(part).decode() for part in oauth["jwt"].split(".")[:2])
        check("push: OAuth assertion header exactly as given", head_text == oauth["header"] and head.get("alg") == "RS256", head_text)
        check("push: OAuth assertion claims exactly as given", claims_text == oauth["claims"], claims_text)
        check("push: OAuth assertion iat is now, exp - iat <= 3600",
              claims.get("iat") == oauth["now"] and 0 < claims.get("exp", 0) - claims.get("iat", 0) <= 3600)
        form = urllib.parse.urlencode({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": oauth["jwt"]})
        check("push: OAuth form body exact", form == oauth["form_body"], oauth["form_body"])

    for i, vector in enumerate(section("webhook") or []):
        signed = ("%s.%s." % (vector["id"], vector["timestamp"])).encode() + vector["body"].encode()
        entries = []
        for secret in vector["secrets"]:
            key = base64.b64decode(secret[len("whsec_"):])
            entries.append("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode())
        check("push: webhook signature %d (%d secret(s))" % (i, len(vector["secrets"])),
              hmac.compare_digest(" ".join(entries), vector["signature"]), "expected %s" % " ".join(entries))
