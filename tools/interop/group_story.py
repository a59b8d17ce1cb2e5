"""Issue 30 item 6: a group joined with CLI members through a live relay, written from spec/groups.md,
spec/ratchet.md and spec/protocol.md §4.25 alone (relay_client.py runs it on its relay).

Two CLI profiles (gadmin, gmem) and two Python users of check.py's version 2 (pyg, pyg2):

  1. gadmin creates a group "Trip" with gmem and pyg (`mailslot group create`); pyg receives the
     genesis in its pairwise session with gadmin, verifies it (§2.3, with gadmin's pinned identity
     key), builds the version 1 state and agrees with its hash and with `group show --json`.
  2. pyg sends a group text, one message id, sealed in its ratchet with each CLI member, as ONE
     `POST /v1/messages`; both CLIs' `receive --json` show it with `group` {id, name}.
  3. gadmin adds pyg2: pyg verifies and folds the change (§3) to the state gadmin shows; pyg2's
     copy is a welcome whose `base` it checks (§2.3 check 4) and folds from.
  4. gadmin removes pyg: pyg's fold shows it removed. gadmin's next group message is then in the
     mailboxes of gmem and pyg2 (the relay's listing, seen through a second session of gmem's uid)
     and in none of pyg's: the relay holds no copy for the removed member (§4.4).
"""
import os, time

import group_vectors as gv


class Member:
    """A Python member's view of one group: the starting state and its verified changes (§3.1)."""

    def __init__(self):
        self.start, self.changes = None, []

    def state(self):
        return gv.fold(self.start, self.changes)[0]


def scenario_groups_with_cli(c, h):
    """h: relay_client (its helpers and classes)."""
    rel, fmt, ok, expect, request = c.relay, h.fmt, h.ok, h.expect, h.request
    if not os.access(c.cli_binary, os.X_OK):
        return ok("the mailslot CLI binary is present", False, c.cli_binary)
    cli = {u: h.Cli(c.cli_binary, os.path.join(c.tmp, f"home-{u}")) for u in ("gadmin", "gmem")}

    def run(u, *args, stdin=None):
        return cli[u].run(*args, "--profile", u, stdin=stdin)

    for u in cli:
        rc, lines, err = run(u, "login", "--relay", f"http://127.0.0.1:{rel.port}", "--token", "-", "--json",
                             stdin=c.issuer.token(u) + "\n")
        if not ok(f"CLI {u} logs in → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}"):
            return
    py, py2 = h.V2User("pyg"), h.V2User("pyg2")
    gmem_owner = h.User("gmem")                        # a second session of gmem's uid: the relay's listing of its mailbox
    for u in (py, py2, gmem_owner):
        u.grant = h.sign_in(rel, c.issuer, u)
    for u in (py, py2):
        expect(f"{u.uid} publishes a version 2 bundle → 204", request(rel, "PUT", f"/v1/users/{u.uid}/keys", u.bundle(), u.session), 204)
        expect(f"{u.uid} uploads one-time prekeys → 200",
               request(rel, "POST", f"/v1/users/{u.uid}/prekeys", {"prekeys": u.make_prekeys(5)}, u.session), 200)

    def mailbox(u, session=None):
        r = request(rel, "GET", f"/v1/users/{u.uid}/messages", session=session or u.session)
        if r.status != 200:
            raise RuntimeError(f"{u.uid}'s listing: {r!r}")
        return r.json["messages"]

    def receive_changes(u, m, what):
        """Every record in u's mailbox: opened in its ratchet (spec/ratchet.md §5.3), acked, and each
        `group_change` checked as spec/groups.md §2.3 says and kept for the fold. Returns the bodies."""
        bodies = []
        for rec in mailbox(u):
            _, _, msg = u.accept(rel, rec)
            request(rel, "DELETE", f"/v1/users/{u.uid}/messages/{rec['id']}", session=u.session)
            bodies.append(msg)
            if msg.get("type") != "group_change":
                continue
            g, obj = msg["group"], msg["payload"]["group_change"]
            ch = gv.Change(obj)                                                     # check 1
            gid = gv.b64d(g["id"], 16)
            ok(f"{u.uid} ({what}): the change's author is the message's sender, {rec['author']} (groups.md §2.1)",
               ch.author == msg["sender"]["id"] == rec["author"], (ch.author, msg["sender"], rec["author"]))
            try:
                ch.verify(gid, u.pins[ch.author])                                   # checks 3-5, the pinned key (check 2)
                verified = True
            except gv.GroupError as e:
                verified = e.code
            ok(f"{u.uid} ({what}): version {ch.version} verifies with {ch.author}'s pinned identity key (§2.2, §2.3)", verified is True,
               verified)
            if ch.version == 1:
                m.start = gv.State(gid, 1, gv.ZERO32, ch.name, sorted(ch.ops["add"], key=gv.key), [ch.author]).check()
            elif m.start is None and ch.base is not None:
                m.start = ch.base                                                   # a welcome: its origin is base.version + 1
            m.changes.append(ch)
            s = m.state()
            ok(f"{u.uid} ({what}): the fold reaches version {ch.version}, the state hash the change and its message name (§3, §4.1)",
               s.version == ch.version == g["version"] and s.hash() == ch.state_hash and gv.b64e(s.hash()) == g["state_hash"],
               (s.version, gv.b64e(s.hash()), g))
        return bodies

    def shows(u, s, what):
        rc, lines, err = run(u, "group", "show", gid_text, "--json")
        want = {"id": gid_text, "name": s.name, "members": s.members, "admins": s.admins, "version": s.version}
        got = {k: lines[0].get(k) for k in want} if rc == 0 and len(lines) == 1 else None
        return ok(f"`{u} group show --json` ({what}) is the Python fold: {s.members}, admins {s.admins}, version {s.version}",
                  got == want, f"exit {rc}, {lines}, stderr {err!r}; Python {want}")

    # 1. The genesis (spec/groups.md §2.1): gadmin creates the group with gmem and pyg.
    rc, lines, err = run("gadmin", "group", "create", "Trip", "gmem", "pyg", "--json")
    gid_text = lines[0].get("id") if rc == 0 and len(lines) == 1 else None
    if not ok("`gadmin group create Trip gmem pyg --json` → exit 0 and the group id, 22 characters of base64url (groups.md §1.1)",
              isinstance(gid_text, str) and gv.b64d(gid_text, 16) is not None and len(gid_text) == 22, f"exit {rc}, {lines}, stderr {err!r}"):
        return
    m = Member()
    bodies = receive_changes(py, m, "the genesis")
    ok("pyg's mailbox held exactly gadmin's genesis: a group_change of version 1 for this group",
       [(b.get("type"), b.get("group", {}).get("id"), b.get("group", {}).get("version")) for b in bodies]
       == [("group_change", gid_text, 1)], bodies)
    if m.start is None:
        return
    s = m.state()
    ok("the genesis state: members gadmin, gmem, pyg; admins [gadmin]; name Trip (§2.1 Genesis)",
       s.members == ["gadmin", "gmem", "pyg"] and s.admins == ["gadmin"] and s.name == "Trip", s.json())
    shows("gadmin", s, "after the create")
    rc, lines, err = run("gmem", "receive", "--json")
    ok("gmem's `receive --json` takes the genesis → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
    shows("gmem", s, "the genesis received")

    # 2. pyg's group message: one id, sealed in each pairwise ratchet, one POST /v1/messages (§4.25).
    mid, words = h.new_id(), "hello group, from python"
    body = fmt.jdump({"group": {"id": gid_text, "state_hash": gv.b64e(s.hash()), "version": s.version},
                      "payload": {"text": words}, "sender": {"id": "pyg", "name": "Pyg"},
                      "timestamp": int(time.time() * 1000), "type": "text"})
    entries = []
    for peer in ("gadmin", "gmem"):
        if peer not in py.active:
            py.start_session(rel, peer)                                  # gmem: X3DH with a claimed prekey (ratchet.md §3)
        sess = py.py.sessions[py.active[peer]]
        env = fmt.seal_v2(body, mid, "pyg", py.py.identity, peer, py.mailboxes[peer], sess,
                          lambda padded, peer=peer: fmt.seal_record(None, py.mailboxes[peer], padded))
        entries.append({"to": peer, "id": mid, "envelope": fmt.b64e(env), "key_id": fmt.key_id(py.pins[peer], py.mailboxes[peer])})
    r = request(rel, "POST", "/v1/messages", {"entries": entries}, py.session)
    res = r.json.get("results") if r.status == 200 and isinstance(r.json, dict) else None
    ok("pyg's group text to gadmin and gmem as one POST /v1/messages → 200, both entries created (protocol.md §4.25)",
       isinstance(res, list) and [(x.get("to"), x.get("id"), x.get("created")) for x in res]
       == [("gadmin", mid, True), ("gmem", mid, True)], repr(r))
    for u in ("gadmin", "gmem"):
        rc, lines, err = run(u, "receive", "--json")
        got = [x for x in lines if x.get("id") == mid]
        ok(f"`{u} receive --json` shows it from pyg, with group {{id, name: Trip}} (groups.md §4.1, design §7.5)",
           rc == 0 and len(got) == 1 and got[0].get("from") == "pyg" and got[0].get("text") == words
           and got[0].get("group") == {"id": gid_text, "name": "Trip"}, f"exit {rc}, {lines}, stderr {err!r}")

    # 3. gadmin adds pyg2: pyg folds the change; pyg2's copy is a welcome with `base`.
    rc, lines, err = run("gadmin", "group", "add", gid_text, "pyg2")
    ok("`gadmin group add GROUP pyg2` → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
    receive_changes(py, m, "pyg2 added")
    s = m.state()
    ok("pyg's fold: pyg2 is a member at version 2, built on the genesis (§3.2)",
       s.version == 2 and s.members == ["gadmin", "gmem", "pyg", "pyg2"] and s.previous == m.start.hash(), s.json())
    shows("gadmin", s, "pyg2 added")
    m2 = Member()
    bodies = receive_changes(py2, m2, "its welcome")
    welcome = [b for b in bodies if b.get("type") == "group_change"]
    ok("pyg2's welcome carries `base`, the state at version 1, whose hash is the change's `previous` (§2.1, §2.3 check 4)",
       len(welcome) == 1 and m2.start is not None and m2.start.version == 1 and m2.changes[0].previous == m2.start.hash(),
       welcome)
    ok("pyg2's fold from its base is pyg's state: a new member gets the state, no history (§3.1)",
       m2.start is not None and m2.state().hash() == s.hash(), m2.start and m2.state().json())

    # 4. gadmin removes pyg; then the relay holds no copy of the next group message for it.
    rc, lines, err = run("gadmin", "group", "remove", gid_text, "pyg")
    ok("`gadmin group remove GROUP pyg` → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
    receive_changes(py, m, "pyg removed")
    s = m.state()
    ok("pyg receives the change that removes it (sent to the removed too, design §3.2) and its fold shows it removed (§4.4)",
       s.version == 3 and "pyg" not in s.members and s.members == ["gadmin", "gmem", "pyg2"], s.json())
    shows("gadmin", s, "pyg removed")
    receive_changes(py2, m2, "pyg removed")
    rc, lines, err = run("gmem", "receive", "--json")
    ok("gmem's `receive --json` takes the changes → exit 0", rc == 0, f"exit {rc}, {lines}, stderr {err!r}")
    after = "after the removal"
    rc, lines, err = run("gadmin", "send", "--group", gid_text, after, "--json")
    sent = lines[0].get("id") if rc == 0 and lines else None
    ok("`gadmin send --group GROUP TEXT --json` → exit 0 and the message id", isinstance(sent, str), f"exit {rc}, {lines}, stderr {err!r}")
    if not sent:
        return
    ok("the relay holds no copy for pyg: its mailbox listing is empty (protocol.md §4.9; groups.md §4.4)",
       mailbox(py) == [], mailbox(py))
    expect("… and pyg's GET of that id → 404", request(rel, "GET", f"/v1/users/pyg/messages/{sent}", session=py.session), 404, "not_found")
    ok("the remaining members' copies are there under that id: gmem's and pyg2's listings (the control)",
       [x["id"] for x in mailbox(gmem_owner)] == [sent] and [x["id"] for x in mailbox(py2)] == [sent],
       (mailbox(gmem_owner), mailbox(py2)))
    bodies = receive_changes(py2, m2, "the message after the removal")
    ok("pyg2 opens it: gadmin's text under the group at version 3, the state hash of its own fold (§4.1)",
       len(bodies) == 1 and bodies[0].get("payload", {}).get("text") == after
       and bodies[0].get("group") == {"id": gid_text, "state_hash": gv.b64e(m2.state().hash()), "version": 3}, bodies)
    rc, lines, err = run("gmem", "receive", "--json")
    got = [x for x in lines if x.get("id") == sent]
    ok("gmem's `receive --json` shows it, from gadmin, with the group", rc == 0 and len(got) == 1 and got[0].get("from") == "gadmin"
       and got[0].get("group") == {"id": gid_text, "name": "Trip"}, f"exit {rc}, {lines}, stderr {err!r}")
