"""The send to many (spec/protocol.md §4.25, §8.3 `send_many`, §9, §10.2), black-box, written from
spec/ alone; relay_client.py runs it against its relay (--create-burst 30, --max-batch-entries 30,
--max-pending 10, the default --max-batch-bytes of 8 MiB).

A Python-built batch whose entries are stored, an identical retry of a stored message, a conflict,
a stale key id, a blocked author, an invalid uid and an invalid id, answered one result per entry,
in entry order, each as the single create would have answered it; what was refused is not stored,
and the stored entries to one mailbox take `seq` in entry order. Then the whole batch again; the
requests refused whole (`invalid_entries` for no entries, a repeated pair and one entry too many,
`invalid_ttl` before it, `invalid_json`, 401, 415, 413 over the byte bound) with nothing stored;
the rate counted in entries (a tail `rate_limited` with `retry_after`, an identical retry still
answered after it); and the same request as a WebSocket `send_many`.
"""
import json, os

MAX_BATCH_BYTES = 8388608           # --max-batch-bytes, the default (protocol.md §4.25, §11)


def scenario_batch(c, h):
    """h: relay_client (its helpers: ok, expect, request, is_problem, User, sign_in, …)."""
    rel, fmt, ok, expect, request = c.relay, h.fmt, h.ok, h.expect, h.request
    users = {u: h.User(u) for u in ("bat", "batb", "batc", "batd", "batk", "batr")}
    for u in users.values():
        u.grant = h.sign_in(rel, c.issuer, u)
    bat, batb, batc, batd, batk, batr = (users[u] for u in ("bat", "batb", "batc", "batd", "batk", "batr"))

    def post(body, session=bat.session, **kw):
        return request(rel, "POST", "/v1/messages", body, session, **kw)

    def owner_get(u, mid):
        return request(rel, "GET", f"/v1/users/{u.uid}/messages/{mid}", session=u.session)

    def key_id_of(uid):
        b = fmt.decode_bundle(h.fetch_bundle(rel, bat, uid).body.decode(), uid)
        return fmt.key_id(fmt.b64d(b["identity_key"]), fmt.b64d(b["mailbox_key"]))

    def problem_ok(p, status, code):
        """A result's problem is the §10.1 body the single create would have answered."""
        return (isinstance(p, dict) and p.get("code") == code and p.get("status") == status
                and p.get("title") == code.replace("_", " ") and "type" not in p)

    # The set-up, through single creates and the block list (§4.7, §4.12).
    expect("batk publishes keys → 204", request(rel, "PUT", "/v1/users/batk/keys", batk.bundle(), batk.session), 204)
    old_kid = key_id_of("batk")
    batk.mailbox = h.nacl.public.PrivateKey.generate()
    expect("batk publishes a new mailbox key → 204: the old key id is stale (§4.7)",
           request(rel, "PUT", "/v1/users/batk/keys", batk.bundle(), batk.session), 204)
    new_kid = key_id_of("batk")
    expect("batd blocks bat → 204 (§4.12)", request(rel, "PUT", "/v1/users/batd/blocked/bat", session=batd.session), 204)
    m_dup, env_dup = h.new_id(), h.rand_envelope()
    r = request(rel, "PUT", f"/v1/users/batb/messages/{m_dup}", {"envelope": env_dup}, bat.session)
    expect("bat stores one message for batb with a single create → 201", r, 201)
    dup_record = r.json
    m_conf = h.new_id()
    expect("… and one for batc → 201", request(rel, "PUT", f"/v1/users/batc/messages/{m_conf}", {"envelope": h.rand_envelope()},
                                              bat.session), 201)

    ids = [h.new_id() for _ in range(8)]
    entries = [
        {"to": "batb", "id": ids[0], "envelope": h.rand_envelope()},                           # stored
        {"to": "batk", "id": ids[1], "envelope": h.rand_envelope(), "key_id": old_kid},        # stale_keys
        {"to": "batd", "id": ids[2], "envelope": h.rand_envelope()},                           # blocked
        {"to": "batb", "id": m_dup, "envelope": env_dup},                                      # identical retry
        {"to": "batc", "id": m_conf, "envelope": h.rand_envelope()},                           # conflict
        {"to": "not a uid", "id": ids[3], "envelope": h.rand_envelope()},                      # invalid_uid
        {"to": "batc", "id": "short!", "envelope": h.rand_envelope()},                         # invalid_message_id
        {"to": "batc", "id": ids[4], "envelope": fmt.b64e(os.urandom(600))},                   # invalid_envelope: no size class
        {"to": "batk", "id": ids[5], "envelope": h.rand_envelope(), "key_id": new_kid},        # stored
        {"to": "batb", "id": ids[6], "envelope": h.rand_envelope(1024)},                       # stored, after ids[0] in batb's mailbox
    ]
    want = [("created", True), (409, "stale_keys"), (403, "blocked"), ("created", False), (409, "conflict"),
            (400, "invalid_uid"), (400, "invalid_message_id"), (400, "invalid_envelope"), ("created", True), ("created", True)]
    r = post({"entries": entries, "ttl_seconds": 3600})
    res = r.json.get("results") if r.status == 200 and isinstance(r.json, dict) else None
    ok("a batch of 10 entries → 200 {\"results\":[…]}, one result per entry (protocol.md §4.25)",
       isinstance(res, list) and len(res) == len(entries) and set(r.json) == {"results"}, repr(r))
    if not isinstance(res, list) or len(res) != len(entries):
        return
    ok("each result names its entry's to and id, in entry order — the invalid ones as they were sent (§4.25)",
       [(x.get("to"), x.get("id")) for x in res] == [(e["to"], e["id"]) for e in entries], [(x.get("to"), x.get("id")) for x in res])
    for i, (e, x, (a, b)) in enumerate(zip(entries, res, want)):
        if a == "created":
            good = x.get("created") is b and "problem" not in x and h.record_shape(x.get("message"), "bat", e["id"], False) == ""
            if not b:
                good = good and x.get("message") == dup_record
            ok(f"entry {i} to {e['to']}: created {str(b).lower()} with the sender's view of the record"
               f"{' (the stored one: an identical retry, §5.1)' if not b else ''}", good, x)
        else:
            ok(f"entry {i} to {e['to']!r}: problem {a} {b}, as the single create answers (§4.25, §10.1)",
               problem_ok(x.get("problem"), a, b) and "created" not in x and "message" not in x, x)
    expect("the stale entry was not stored: batk's GET → 404", owner_get(batk, ids[1]), 404, "not_found")
    expect("the blocked entry was not stored: batd's GET → 404", owner_get(batd, ids[2]), 404, "not_found")
    expect("the invalid envelope was not stored: batc's GET → 404", owner_get(batc, ids[4]), 404, "not_found")
    a, b = owner_get(batb, ids[0]), owner_get(batb, ids[6])
    ok("the stored entries are in their mailboxes; batb's two in entry order of seq (§4.25)",
       a.status == 200 and b.status == 200 and a.json["seq"] < b.json["seq"] and a.json["envelope"] == entries[0]["envelope"]
       and owner_get(batk, ids[5]).status == 200, f"{a!r} {b!r}")
    r2 = post({"entries": entries, "ttl_seconds": 3600})
    res2 = r2.json.get("results") if r2.status == 200 and isinstance(r2.json, dict) else []
    ok("the whole batch again → every stored entry answers created false with its record; the refusals are the same (§5.1)",
       len(res2) == len(entries) and all(
           (y.get("created") is False and y.get("message") == x.get("message")) if "message" in x
           else y.get("problem", {}).get("code") == x["problem"]["code"] for x, y in zip(res, res2)), repr(r2))

    # Refused whole: nothing stored (§4.25's 400s, checked in §9's order).
    fresh = h.new_id()
    one = {"to": "batc", "id": fresh, "envelope": h.rand_envelope()}
    expect("no entries → 400 invalid_entries", post({"entries": []}), 400, "invalid_entries")
    expect("a (to, id) pair twice → 400 invalid_entries", post({"entries": [one, dict(one, envelope=h.rand_envelope())]}),
           400, "invalid_entries")
    over = [{"to": f"batx{i}", "id": fresh, "envelope": h.rand_envelope()} for i in range(31)]
    expect("31 entries, one over --max-batch-entries 30 → 400 invalid_entries", post({"entries": over}), 400, "invalid_entries")
    expect("a bad ttl_seconds and no entries → 400 invalid_ttl (the ttl first, §9)", post({"entries": [], "ttl_seconds": 0}),
           400, "invalid_ttl")
    expect("an entry without an envelope → 400 invalid_json", post({"entries": [one, {"to": "batb", "id": h.new_id()}]}),
           400, "invalid_json")
    expect("entries not an array → 400 invalid_json", post({"entries": one}), 400, "invalid_json")
    expect("no session → 401 unauthenticated", request(rel, "POST", "/v1/messages", {"entries": [one]}), 401, "unauthenticated")
    expect("text/plain → 415 unsupported_media_type", post({"entries": [one]}, ctype="text/plain"), 415, "unsupported_media_type")
    body = json.dumps({"entries": [one]}).encode()
    big = body[:-1] + b" " * (MAX_BATCH_BYTES + 1 - len(body)) + b"}"
    try:
        r = post(big, timeout=30)
        expect(f"a batch body of {len(big)} bytes, one over --max-batch-bytes → 413 body_too_large (§4.25)", r, 413, "body_too_large")
    except OSError as e:                                 # the relay may answer and close before the body is sent
        ok("a batch body one byte over --max-batch-bytes → 413 body_too_large (§4.25)", False, f"{type(e).__name__}: {e}")
    expect("none of these refused requests stored the entry: batc's GET → 404", owner_get(batc, fresh), 404, "not_found")

    # The rate in entries (§5.5): batr's burst of 30 spent by one batch, then a tail refused.
    first = [{"to": f"batr{i}", "id": h.new_id(), "envelope": h.rand_envelope()} for i in range(30)]
    r = post({"entries": first}, session=batr.session)
    ok("batr's batch of 30 to 30 mailboxes (the whole burst) → 30 × created", r.status == 200
       and [x.get("created") for x in r.json["results"]] == [True] * 30, repr(r))
    tail = [first[0]] + [{"to": f"batr{i}", "id": h.new_id(), "envelope": h.rand_envelope()} for i in range(4)] + [first[1]]
    r = post({"entries": tail}, session=batr.session)
    res = r.json.get("results", []) if r.status == 200 else []
    codes = [x.get("problem", {}).get("code") or ("retry" if x.get("created") is False else "created") for x in res]
    limited = [x for x in res if x.get("problem", {}).get("code") == "rate_limited"]
    ok("at once another 6 — identical retries first and last: those answer created false, the new ones (one token each) "
       "rate_limited with retry_after once short, and never created after a rate_limited (§5.5, §9)",
       len(res) == 6 and codes[0] == "retry" and codes[-1] == "retry" and "rate_limited" in codes
       and "created" not in codes[codes.index("rate_limited"):]
       and all(problem_ok(x["problem"], 429, "rate_limited") and type(x["problem"].get("retry_after")) is int
               and x["problem"]["retry_after"] >= 1 for x in limited), codes)

    # The same request on a subscription socket (§8.3): `sent_many` with the ref, or `error` for the whole.
    w = h.WS(rel, "batc", batc.session)
    c.sockets.append(w)
    w.frame()
    mid = h.new_id()
    many = [{"to": "batb", "id": mid, "envelope": h.rand_envelope()}, {"to": "batd", "id": mid, "envelope": h.rand_envelope()}]
    w.send({"type": "send_many", "ref": "many-1", "entries": many})
    f = w.of("sent_many", ref="many-1")
    rs = f.get("results", [])
    ok("WS send_many → sent_many with the ref, one result per entry: batb's created, batd's (who did not block batc) too (§8.3)",
       [(x.get("to"), x.get("id"), x.get("created")) for x in rs] == [("batb", mid, True), ("batd", mid, True)], f)
    w.send({"type": "send_many", "ref": "many-2", "entries": []})
    f = w.of("error", ref="many-2")
    ok("WS send_many with no entries → error invalid_entries with the ref, the socket stays open (§8.3)",
       f.get("problem", {}).get("code") == "invalid_entries" and f["problem"].get("status") == 400, f)
    w.send({"type": "send_many", "ref": "many-3", "entries": [many[0]]})
    f = w.of("sent_many", ref="many-3")
    ok("… then a send_many on the same socket is answered: the identical retry, created false", [x.get("created") for x in f.get("results", [])] == [False], f)
    w.close()
