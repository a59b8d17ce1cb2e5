"""Groups (spec/groups.md), written from the spec alone: the state's JSON, canonical bytes and
hash, the change's signed bytes and verification, the fold, and the `group` member of chat
bodies. check.py calls check_group_vectors on spec/vectors/groups.json and validate_group_body
from its body reader. Nothing here reads the Swift code: the fold below is §3.2 as written."""

import base64, hashlib, json, re

import nacl.bindings, nacl.exceptions, nacl.signing

# MAX_OP_UIDS: a full group's genesis names its 1,000 members and its creator once more (spec/groups.md §1.1).
MAX_MEMBERS, MAX_STATE_BYTES, MAX_NAME, MAX_OP_UIDS, MAX_VERSION, MAX_HISTORY = 1000, 49152, 128, 1001, (1 << 53) - 1, 64
ZERO32 = bytes(32)

# Every MUST of spec/groups.md the vectors exercise, as a switch (all on); mutations.py turns each
# off in turn and requires some case of spec/vectors/groups.json to fail then.
RULES = dict.fromkeys([
    "group_ascending", "group_admins_members", "group_state_size", "group_name_controls", "group_ops_one_list",
    "group_ops_not_empty", "group_ops_unknown", "group_genesis_form", "group_base_hash", "group_seniority_pass",
    "group_senior_name", "group_junior_only", "group_gap", "group_cap",
    "group_change_version", "group_history_count",
], True)


class GroupError(Exception):
    def __init__(self, code, detail=""):
        super().__init__(f"{code}: {detail}")
        self.code = code


def malformed(detail):
    return GroupError("group_malformed", detail)


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


_B64VAL = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def b64d(s, n):
    """Strict unpadded base64url of exactly n bytes, else None."""
    if not isinstance(s, str) or re.fullmatch(r"[A-Za-z0-9_-]*", s) is None or len(s) % 4 == 1:
        return None
    if len(s) % 4 and _B64VAL[s[-1]] & (0x0F if len(s) % 4 == 2 else 0x03):
        return None
    b = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    return b if len(b) == n else None


def pae(*pieces):
    le = lambda n: (n & 0x7FFFFFFFFFFFFFFF).to_bytes(8, "little")  # noqa: E731
    return le(len(pieces)) + b"".join(le(len(p)) + p for p in pieces)


def is_uid(u):
    return isinstance(u, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,128}", u) is not None and u not in (".", "..")


def is_int(v):
    return type(v) is int


def key(u):
    """UTF-8 byte order."""
    return u.encode()


def check_name(name):
    if not isinstance(name, str) or not 1 <= len(name.encode()) <= MAX_NAME or (
            any(ord(c) < 0x20 or ord(c) == 0x7F for c in name) and RULES["group_name_controls"]):
        raise malformed("name")


def check_ascending(lst, what):
    if not isinstance(lst, list) or not all(is_uid(u) for u in lst):
        raise malformed(what)
    if any(key(a) >= key(b) for a, b in zip(lst, lst[1:])) and RULES["group_ascending"]:
        raise malformed(what + " not strictly ascending")


# ---------------------------------------------------------------- §1 state

class State:
    def __init__(self, gid, version, previous, name, members, admins):
        self.gid, self.version, self.previous, self.name = gid, version, previous, name
        self.members, self.admins = list(members), list(admins)

    def check(self):
        if not (is_int(self.version) and 1 <= self.version <= MAX_VERSION):
            raise malformed("version")
        if len(self.previous) != 32 or (self.version == 1 and self.previous != ZERO32):
            raise malformed("previous")
        check_name(self.name)
        if len(self.members) > MAX_MEMBERS:
            raise malformed("members")
        check_ascending(self.members, "members")
        if not isinstance(self.admins, list) or len(set(self.admins)) != len(self.admins) or (
                not set(self.admins) <= set(self.members) and RULES["group_admins_members"]):
            raise malformed("admins")
        if len(self.json()) > MAX_STATE_BYTES and RULES["group_state_size"]:
            raise malformed("size")
        return self

    def json(self):
        """§1.2 writing: sorted members, no whitespace, only `"` and `\\` escaped, raw UTF-8."""
        s = lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'  # noqa: E731
        lst = lambda xs: "[" + ",".join(s(x) for x in xs) + "]"  # noqa: E731
        return (f'{{"admins":{lst(self.admins)},"id":{s(b64e(self.gid))},"members":{lst(self.members)},'
                f'"name":{s(self.name)},"previous":{s(b64e(self.previous))},"version":{self.version}}}').encode()

    def bytes(self):
        return pae(b"mailslot-group-state-v1", self.gid, self.version.to_bytes(8, "big"), self.previous, self.name.encode(),
                   pae(*[m.encode() for m in self.members]), pae(*[a.encode() for a in self.admins]))

    def hash(self):
        return hashlib.blake2b(self.bytes(), digest_size=32).digest()


def parse_state(obj):
    if not isinstance(obj, dict):
        raise malformed("state")
    for k in ("id", "version", "previous", "name", "members", "admins"):
        if k not in obj:
            raise malformed("missing " + k)
    gid, prev = b64d(obj["id"], 16), b64d(obj["previous"], 32)
    if gid is None or len(obj["id"]) != 22 or prev is None:
        raise malformed("id or previous")
    if not isinstance(obj["admins"], list) or not all(isinstance(a, str) for a in obj["admins"]):
        raise malformed("admins")
    return State(gid, obj["version"], prev, obj["name"], obj["members"], obj["admins"]).check()


# ---------------------------------------------------------------- §2 changes

OPS = ("add", "remove", "promote", "demote")


class Change:
    def __init__(self, obj):
        if not isinstance(obj, dict):
            raise malformed("change")
        v, ops = obj.get("version"), obj.get("ops")
        if not (is_int(v) and 1 <= v <= MAX_VERSION):
            raise malformed("version")
        self.version = v
        self.previous, self.state_hash, self.signature = b64d(obj.get("previous"), 32), b64d(obj.get("state_hash"), 32), b64d(obj.get("signature"), 64)
        if self.previous is None or self.state_hash is None or self.signature is None:
            raise malformed("base64url fields")
        self.author = obj.get("author")
        if not is_uid(self.author):
            raise malformed("author")
        if not isinstance(ops, dict) or not ops or (set(ops) - set(OPS + ("name",)) and RULES["group_ops_unknown"]):
            raise malformed("ops")
        self.ops, count = {}, 0
        for k in OPS:
            if k in ops:
                if not isinstance(ops[k], list) or (not ops[k] and RULES["group_ops_not_empty"]):
                    raise malformed("empty or not a list")
                check_ascending(ops[k], k)
                count += len(ops[k])
            self.ops[k] = list(ops.get(k) or [])
        if count > MAX_OP_UIDS:
            raise malformed("too many uids")
        self.name = ops.get("name") if "name" in ops else None
        if "name" in ops:
            check_name(ops["name"])
        a, r, p, d = (set(self.ops[k]) for k in OPS)
        if (a & r or a & d or r & p or r & d or p & d) and RULES["group_ops_one_list"]:
            raise malformed("a uid in two lists")
        self.base, self.base_problem = None, None
        if v == 1 and (self.previous != ZERO32 or "base" in obj):
            raise malformed("genesis form")
        if "base" in obj:
            try:
                self.base = parse_state(obj["base"])
            except GroupError:
                self.base_problem = "base is not a state"

    def signed_bytes(self, gid):
        ops_bytes = pae(b"\x00" if self.name is None else b"\x01" + self.name.encode(),
                        *[pae(*[u.encode() for u in self.ops[k]]) for k in OPS])
        return pae(b"mailslot-group-change-v1", gid, self.version.to_bytes(8, "big"), self.previous, self.author.encode(), ops_bytes, self.state_hash)

    def cid(self, gid):
        return hashlib.blake2b(self.signed_bytes(gid), digest_size=32).digest()

    def is_leave(self):
        return self.ops["remove"] == [self.author] and not (self.ops["add"] or self.ops["promote"] or self.ops["demote"]) and self.name is None

    def verify(self, gid, author_key):
        """§2.3 checks 3-5 (check 1 was the parse)."""
        try:
            nacl.signing.VerifyKey(author_key).verify(self.signed_bytes(gid), self.signature)
        except nacl.exceptions.BadSignatureError:
            raise GroupError("group_bad_signature")
        if self.base_problem:
            raise GroupError("group_bad_base", self.base_problem)
        if self.base is not None and (self.base.gid != gid or self.base.version != self.version - 1
                                      or (self.base.hash() != self.previous and RULES["group_base_hash"])):
            raise GroupError("group_bad_base")
        if self.version == 1 and RULES["group_genesis_form"]:
            if (self.author not in self.ops["add"] or self.ops["promote"] != [self.author] or self.name is None
                    or self.ops["remove"] or self.ops["demote"]):
                raise malformed("genesis")


# ---------------------------------------------------------------- §3 the fold

def authorised(c, B, E):
    a = c.author
    if c.is_leave():
        return a in B.members
    if a not in E:
        return False
    rank = B.admins.index(a)
    junior_or_self = lambda u: u in B.admins and B.admins.index(u) >= rank  # noqa: E731
    if any(u in B.members for u in c.ops["add"]):
        return False
    if any(u not in B.members or (u in B.admins and not junior_or_self(u) and RULES["group_junior_only"]) for u in c.ops["remove"]):
        return False
    if any(not (junior_or_self(u) or (u in B.admins and not RULES["group_junior_only"])) for u in c.ops["demote"]):
        return False
    if any(u in B.admins or (u not in B.members and u not in c.ops["add"]) for u in c.ops["promote"]):
        return False
    return True


def merge(B, A, v):
    adds = {u for c in A for u in c.ops["add"]}
    removes = {u for c in A for u in c.ops["remove"]}
    demotes = {u for c in A for u in c.ops["demote"]}
    promotions = [u for c in A for u in c.ops["promote"]]
    names = [c.name for c in A if c.name is not None]
    name = (names[0] if RULES["group_senior_name"] else names[-1]) if names else B.name

    def make(adds, promotions, name):
        members = sorted((set(B.members) | adds) - removes, key=key)
        lost = removes | demotes
        admins = [x for x in B.admins if x not in lost]
        for u in promotions:
            if u in members and u not in lost and u not in admins:
                admins.append(u)
        return State(B.gid, v, B.hash(), name, members, admins)

    for attempt in (make(adds, promotions, name), make(set(), promotions, name), make(set(), [], B.name)):
        if (len(attempt.members) <= MAX_MEMBERS and len(attempt.json()) <= MAX_STATE_BYTES) or not RULES["group_cap"]:
            return attempt
    return attempt


def fold(start, changes):
    """Returns (state, void change ids)."""
    gid, by_version, seen = start.gid, {}, set()
    for c in changes:
        i = c.cid(gid)
        if i in seen or c.version <= start.version:
            continue
        seen.add(i)
        by_version.setdefault(c.version, []).append((i, c))
    S, expected, void = start, start.version + 1, set()
    for v in sorted(by_version):
        if v != expected and RULES["group_gap"]:
            break
        expected = v + 1
        B = S
        rank = lambda ic: ((B.admins.index(ic[1].author), b"") if ic[1].author in B.admins else (len(B.admins), key(ic[1].author)), ic[0])  # noqa: E731
        E, A = list(B.admins), []
        for i, c in sorted(by_version[v], key=rank):
            if authorised(c, B, E):
                A.append(c)
                if RULES["group_seniority_pass"]:
                    E = [x for x in E if x not in c.ops["demote"] and x not in c.ops["remove"]]
            else:
                void.add(i)
        if A:
            S = merge(B, A, v)
    return S, void


# ---------------------------------------------------------------- §4 bodies

def validate_group_body(msg, typ, pl):
    """spec/groups.md §4.1–§4.2 on a decoded chat body; raises GroupError for a body that is invalid."""
    g = msg.get("group")
    if g is None and typ not in ("group_change", "group_sync", "group_history"):
        return
    if not isinstance(g, dict) or b64d(g.get("id"), 16) is None or len(g.get("id", "")) != 22:
        raise malformed("group")
    if not (is_int(g.get("version")) and 1 <= g["version"] <= MAX_VERSION) or b64d(g.get("state_hash"), 32) is None:
        raise malformed("group")
    if typ == "group_change":
        c = Change(pl.get("group_change"))
        if c.version != g["version"] and RULES["group_change_version"]:
            raise malformed("version")
    elif typ == "group_sync":
        s = pl.get("group_sync")
        if not (isinstance(s, dict) and is_int(s.get("from")) and 0 <= s["from"] <= MAX_VERSION):
            raise malformed("group_sync")
    elif typ == "group_history":
        h = pl.get("group_history")
        if not (isinstance(h, dict) and isinstance(h.get("changes"), list) and (1 <= len(h["changes"]) <= MAX_HISTORY or not RULES["group_history_count"])):
            raise malformed("group_history")
        for c in h["changes"]:
            Change(c)
        if h.get("base") is not None:
            parse_state(h["base"])


# ---------------------------------------------------------------- the vectors

def check_group_vectors(path, check, jload, body_outcome):
    """check(name, ok, why); jload(bytes, depth) is check.py's strict JSON reader; body_outcome(bytes)
    is its chat body reader ("ok" or a code)."""
    with open(path, "rb") as f:
        v = json.load(f)
    seeds = {u: b64d(s, 32) for u, s in v["seeds"].items()}
    keys = {u: nacl.bindings.crypto_sign_seed_keypair(s)[0] for u, s in seeds.items()}

    def pk(uid):
        return keys.get(uid) or nacl.bindings.crypto_sign_seed_keypair(hashlib.blake2b(b"group test key: " + uid.encode(), digest_size=32).digest())[0]

    gid = b64d(v["group"], 16)
    check("groups: vector keys from the published seeds", all(len(k) == 32 for k in keys.values()))
    for c in v["states"]:
        try:
            s = parse_state(jload(c["state"].encode(), 4))
        except (GroupError, ValueError) as e:
            check(f"groups state {c['name']}", False, str(e))
            continue
        check(f"groups state {c['name']}", s.bytes().hex() == c["state_bytes"] and b64e(s.hash()) == c["state_hash"]
              and s.json().decode() == c["state"] and len(s.json()) == c["json_length"], "bytes, hash or JSON differ")
    for c in v["refused_states"]:
        try:
            parse_state(jload(c["state"].encode(), 4))
            got = "ok"
        except GroupError as e:
            got = e.code
        except ValueError:
            got = "group_malformed"
        check(f"groups refused state {c['name']}", got == c["expect"], got)
    for c in v["changes"]:
        try:
            ch = Change(jload(c["change"].encode(), 8))
            same = ch.signed_bytes(b64d(c["group"], 16)).hex() == c.get("change_bytes") and b64e(ch.cid(b64d(c["group"], 16))) == c.get("change_id")
            check(f"groups change {c['name']} bytes", same, "change_bytes or change_id differ")
            ch.verify(b64d(c["group"], 16), b64d(c["author_key"], 32))
            got = "ok"
        except GroupError as e:
            got = e.code
        except ValueError:
            got = "group_malformed"
        check(f"groups change {c['name']}", got == c["expect"], f"got {got}, expected {c['expect']}")
    for c in v["folds"]:
        try:
            start = parse_state(jload(c["start"].encode(), 4))
            changes = [Change(jload(x.encode(), 8)) for x in c["changes"]]
            for ch in changes:
                ch.verify(gid, pk(ch.author))
        except (GroupError, ValueError) as e:
            check(f"groups fold {c['name']} reads", False, str(e))
            continue
        for order in c["orders"]:
            s, void = fold(start, [changes[i] for i in order])
            check(f"groups fold {c['name']} {order}", s.json().decode() == c["state"] and b64e(s.hash()) == c["state_hash"]
                  and sorted(b64e(i) for i in void) == c["void"], f"got {s.json().decode()[:200]} void {len(void)}")
    # docs/design/groups.md §2.5: its prototype's v3 state hash, from the race's first four changes.
    race = next(c for c in v["folds"] if c["name"] == "race")
    start = parse_state(jload(race["start"].encode(), 4))
    s3, _ = fold(start, [Change(jload(x.encode(), 8)) for x in race["changes"][:4]])
    check("groups fold race: v3 hash as the design's prototype", s3.hash().hex().startswith("9d0c436ed99a6628")
          and s3.members == ["alice", "bob", "dave", "eve"] and s3.admins == ["alice", "bob", "dave"], s3.hash().hex())
    for c in v["messages"]:
        got = body_outcome(c["body"].encode())
        check(f"groups message {c['name']}", got == c["expect"], f"got {got}")
