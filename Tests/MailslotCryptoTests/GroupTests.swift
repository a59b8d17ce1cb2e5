import Foundation
import Testing
@testable import MailslotCrypto

/// The group formats and the fold (spec/groups.md §1–§4): the state's checks and bytes, every
/// refusal of a change in the order of §2.3, the cases of §3.3 and the worked example §3.4, and
/// the fold's independence of order over seeded random histories.
struct GroupTests {
    /// The vectors' users (spec/groups.md §6): Ed25519 seeds alice a1×32, bob b0×32, carol c0×32,
    /// dave d0×32, eve e0×32.
    static let keys: [String: IdentityKeyPair] = [
        "alice": 0xA1, "bob": 0xB0, "carol": 0xC0, "dave": 0xD0, "eve": 0xE0,
    ].mapValues { IdentityKeyPair(seed: SecretBytes(copying: [UInt8](repeating: $0, count: 32))) }
    static let group = GroupID(rawValue: "q0bV7pXx2yM4kQ8sT1uVwA")!

    static func key(_ uid: String) -> IdentityKeyPair {
        keys[uid] ?? IdentityKeyPair(seed: SecretBytes(copying: blake2b(Array("group test key: \(uid)".utf8), length: 32)))
    }

    static func genesis(_ members: [String] = ["alice", "bob", "carol"], by creator: String = "alice",
                        name: String = "Trip") throws -> (change: GroupChange, state: GroupState) {
        try GroupChange.genesis(group: group, name: name, creator: creator, members: members, key: key(creator))
    }

    /// A change by `author` at `state.version + 1` on `state`, signed, whatever the rules say
    /// (concurrent changes are built on the same state; the fold decides).
    static func change(_ author: String, on state: GroupState, _ operations: GroupOperations) throws -> GroupChange {
        try GroupChange.sign(group: state.id, version: state.version + 1, previous: state.hash, author: author,
                             operations: operations, stateHash: [UInt8](repeating: 7, count: 32), key: key(author))
    }

    // MARK: State

    @Test func stateIDsAndBytes() throws {
        #expect(Self.group.bytes == [0xab, 0x46, 0xd5, 0xee, 0x95, 0xf1, 0xdb, 0x23, 0x38, 0x91, 0x0f, 0x2c, 0x4f, 0x5b, 0x95, 0xc0])
        #expect(GroupID(rawValue: "q0bV7pXx2yM4kQ8sT1uVwB") == nil, "stray bits in the last character")
        #expect(GroupID(rawValue: "q0bV7pXx2yM4kQ8sT1uVw") == nil)
        #expect(GroupID.random().rawValue.utf8.count == 22)
        let (_, state) = try Self.genesis()
        #expect(state.members == ["alice", "bob", "carol"] && state.admins == ["alice"] && state.version == 1)
        let expected = preAuthenticationEncoding([
            Array("mailslot-group-state-v1".utf8), Self.group.bytes, [0, 0, 0, 0, 0, 0, 0, 1], [UInt8](repeating: 0, count: 32),
            Array("Trip".utf8), preAuthenticationEncoding([Array("alice".utf8), Array("bob".utf8), Array("carol".utf8)]),
            preAuthenticationEncoding([Array("alice".utf8)]),
        ])
        #expect(state.canonicalBytes == expected)
        #expect(state.hash == blake2b(expected, length: 32))
        let json = state.encoded()
        #expect(String(decoding: json, as: UTF8.self)
            == #"{"admins":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","members":["alice","bob","carol"],"name":"Trip","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#)
        #expect(json.count == state.encodedCount)
        #expect(try GroupState.decode(json) == state)
        // A name needing escapes, and an admin-less state: the sizes still agree.
        let odd = try GroupState(id: Self.group, version: 9, previous: state.hash, name: #"Zoë "quoted" \ 🎉"#,
                                 members: ["Zoe", "alice", "alice.b", "alice_b"], admins: [])
        #expect(odd.encoded().count == odd.encodedCount)
        #expect(try GroupState.decode(odd.encoded()) == odd)
        #expect(odd.canonicalBytes.suffix(8) == [0, 0, 0, 0, 0, 0, 0, 0], "no admins: PAE of no pieces")
        // Unknown members are ignored, and not part of the hash.
        var withExtra = Array(json.dropLast())
        withExtra += Array(#","colour":"blue"}"#.utf8)
        #expect(try GroupState.decode(withExtra).hash == state.hash)
    }

    @Test func stateRefusals() throws {
        let (_, state) = try Self.genesis()
        func refused(_ members: [String], _ admins: [String] = [], name: String = "Trip", version: UInt64 = 2,
                     previous: [UInt8] = [UInt8](repeating: 1, count: 32)) -> Bool {
            do {
                _ = try GroupState(id: Self.group, version: version, previous: previous, name: name, members: members, admins: admins)
                return false
            } catch { return error.code == "group_malformed" }
        }
        #expect(refused(["bob", "alice"]), "unsorted")
        #expect(refused(["alice", "alice"]), "repeated")
        #expect(refused(["alice"], ["bob"]), "an admin who is not a member")
        #expect(refused(["alice", "bob"], ["bob", "bob"]), "an admin twice")
        #expect(refused(["alice"], name: "a\u{7}b"), "a control in the name")
        #expect(refused(["alice"], name: "a\u{7F}b"), "DEL in the name")
        #expect(refused(["alice"], name: ""), "an empty name")
        #expect(refused(["alice"], name: String(repeating: "n", count: 129)), "a name over 128 bytes")
        #expect(refused(["alice", "b/c"]), "an invalid uid")
        #expect(refused(["alice"], version: 0))
        #expect(refused(["alice"], version: 1 << 53))
        #expect(refused(["alice"], version: 1), "version 1 with a previous state")
        #expect(refused(["alice"], previous: [UInt8](repeating: 1, count: 31)))
        #expect(refused((0...1_000).map { String(format: "m%04d", $0) }), "1,001 members")
        #expect(!refused((1...1_000).map { String(format: "m%04d", $0) }), "1,000 members fit")
        // 1,000 members of 64-character uids are over 48 KiB of JSON.
        #expect(refused((1...1_000).map { String(format: "%064d", $0) }))
        // JSON readers.
        for json in [#"{"admins":[],"id":"q0bV7pXx2yM4kQ8sT1uVwA","members":[],"name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1,"version":2}"#,
                     #"{"admins":[],"id":"q0bV7pXx2yM4kQ8sT1uVwA","members":[],"name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#,
                     #"{"admins":[],"id":"q0bV7pXx2yM4kQ8sT1uVw","members":[],"name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#,
                     #"{"admins":[],"id":"q0bV7pXx2yM4kQ8sT1uVwA","members":[],"name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":-1}"#,
                     #"{"admins":[],"id":"q0bV7pXx2yM4kQ8sT1uVwA","members":[],"name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}"#,
                     #"[1]"#] {
            #expect(throws: GroupError.self, "\(json)") { try GroupState.decode(Array(json.utf8)) }
        }
        #expect(state.isMember("bob") && !state.isMember("dave") && state.isAdmin("alice") && !state.isAdmin("bob"))
    }

    // MARK: Changes

    @Test func changeRoundTripAndBytes() throws {
        let (genesis, state) = try Self.genesis()
        #expect(genesis.stateHash == state.hash)
        try genesis.verify(group: Self.group, authorKey: Self.key("alice").publicKey)
        #expect(try GroupState(genesis: genesis, group: Self.group) == state)
        let decoded = try GroupChange.decode(genesis.encoded())
        #expect(decoded == genesis)
        #expect(decoded.id(group: Self.group) == blake2b(genesis.signedBytes(group: Self.group), length: 32))
        let expectedOps = preAuthenticationEncoding([
            [0x01] + Array("Trip".utf8), preAuthenticationEncoding([Array("alice".utf8), Array("bob".utf8), Array("carol".utf8)]),
            preAuthenticationEncoding([]), preAuthenticationEncoding([Array("alice".utf8)]), preAuthenticationEncoding([]),
        ])
        #expect(genesis.operations.canonicalBytes == expectedOps)
        #expect(genesis.signedBytes(group: Self.group) == preAuthenticationEncoding([
            Array("mailslot-group-change-v1".utf8), Self.group.bytes, [0, 0, 0, 0, 0, 0, 0, 1], [UInt8](repeating: 0, count: 32),
            Array("alice".utf8), expectedOps, state.hash,
        ]))
        #expect(GroupOperations(remove: ["bob"]).canonicalBytes.prefix(17) == [5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                "an absent name is the one byte 0x00")
        // The base travels with the change, unsigned, and round-trips.
        let (add, _) = try GroupChange.build(on: state, author: "alice", operations: GroupOperations(add: ["dave"]), key: Self.key("alice"))
        let welcome = add.with(base: state)
        #expect(try GroupChange.decode(welcome.encoded()) == welcome)
        try welcome.verify(group: Self.group, authorKey: Self.key("alice").publicKey)
        #expect(welcome.id(group: Self.group) == add.id(group: Self.group))
    }

    /// Every refusal of spec/groups.md §2.3, and that the first failing check decides.
    @Test func changeVerificationFailures() throws {
        let (genesis, state) = try Self.genesis()
        let alice = Self.key("alice").publicKey, bob = Self.key("bob").publicKey
        let (add, next) = try GroupChange.build(on: state, author: "alice", operations: GroupOperations(add: ["dave"]), key: Self.key("alice"))
        func code(_ body: () throws -> Void) -> String? {
            do { try body(); return nil } catch { return error.code }
        }
        func json(_ change: GroupChange, _ edit: (inout [String: Any]) -> Void) throws -> [UInt8] {
            var object = try #require(try JSONSerialization.jsonObject(with: Data(change.encoded())) as? [String: Any])
            edit(&object)
            return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
        }
        // 1: shape.
        let malformed: [(String, (inout [String: Any]) -> Void)] = [
            ("unsorted add", { $0["ops"] = ["add": ["eve", "dave"]] }),
            ("a uid in add and remove", { $0["ops"] = ["add": ["dave"], "remove": ["dave"]] }),
            ("a uid in promote and demote", { $0["ops"] = ["promote": ["bob"], "demote": ["bob"]] }),
            ("no ops", { $0["ops"] = [String: Any]() }),
            ("an empty list", { $0["ops"] = ["add": [String]()] }),
            ("an unknown op", { $0["ops"] = ["add": ["dave"], "ban": ["eve"]] }),
            ("a null op", { $0["ops"] = ["add": ["dave"], "name": NSNull()] }),
            ("version 0", { $0["version"] = 0 }),
            ("version 2^53", { $0["version"] = 1 << 53 }),
            ("a fractional version", { $0["version"] = 2.5 }),
            ("a short signature", { $0["signature"] = String(($0["signature"] as! String).dropLast(2)) }),
            ("a short state_hash", { $0["state_hash"] = "AAAA" }),
            ("an invalid author", { $0["author"] = "a/b" }),
            ("no author", { $0["author"] = nil }),
            ("a name with a control", { $0["ops"] = ["name": "a\u{1}"] }),
            ("version 1 with a previous state", { $0["version"] = 1 }),
        ]
        for (what, edit) in malformed {
            #expect(code { _ = try GroupChange.decode(try json(add, edit)) } == "group_malformed", "\(what)")
        }
        #expect(code { _ = try GroupChange.decode(Array(#"{"a":1,"a":2}"#.utf8)) } == "group_malformed", "duplicate members")
        // 2: no key for the author.
        #expect(code { try add.verify(group: Self.group, authorKey: nil) } == "group_unknown_author")
        // 3: signature — signed by bob but naming alice; one byte of ops changed; another group.
        let forged = try GroupChange.sign(group: Self.group, version: 2, previous: state.hash, author: "alice",
                                          operations: GroupOperations(promote: ["bob"]), stateHash: next.hash, key: Self.key("bob"))
        #expect(code { try forged.verify(group: Self.group, authorKey: alice) } == "group_bad_signature")
        let altered = try GroupChange.decode(try json(add) { $0["ops"] = ["add": ["davf"]] })
        #expect(code { try altered.verify(group: Self.group, authorKey: alice) } == "group_bad_signature")
        #expect(code { try add.verify(group: GroupID(bytes: [UInt8](repeating: 9, count: 16))!, authorKey: alice) } == "group_bad_signature")
        // 4: base.
        let (_, otherState) = try Self.genesis(["alice", "bob"])
        #expect(code { try add.with(base: otherState).verify(group: Self.group, authorKey: alice) } == "group_bad_base", "another state")
        #expect(code { try add.with(base: next).verify(group: Self.group, authorKey: alice) } == "group_bad_base", "another version")
        let notAState = try GroupChange.decode(try json(add.with(base: state)) { object in
            var base = object["base"] as! [String: Any]
            base["members"] = ["carol", "bob", "alice"]
            object["base"] = base
        })
        #expect(code { try notAState.verify(group: Self.group, authorKey: alice) } == "group_bad_base", "an unsorted base")
        let badBaseBadSignature = try GroupChange.decode(try json(forged.with(base: otherState)) { _ in })
        #expect(code { try badBaseBadSignature.verify(group: Self.group, authorKey: alice) } == "group_bad_signature",
                "the signature is checked before the base")
        // 5: the genesis form, after the signature.
        let withoutAuthor = try GroupChange.sign(group: Self.group, version: 1, previous: GroupState.noPrevious, author: "alice",
                                                 operations: GroupOperations(add: ["bob"], promote: ["alice"], name: "T"),
                                                 stateHash: state.hash, key: Self.key("alice"))
        #expect(code { try withoutAuthor.verify(group: Self.group, authorKey: alice) } == "group_malformed")
        #expect(code { try withoutAuthor.verify(group: Self.group, authorKey: bob) } == "group_bad_signature")
        let noName = try GroupChange.sign(group: Self.group, version: 1, previous: GroupState.noPrevious, author: "alice",
                                          operations: GroupOperations(add: ["alice"], promote: ["alice"]),
                                          stateHash: state.hash, key: Self.key("alice"))
        #expect(code { try noName.verify(group: Self.group, authorKey: alice) } == "group_malformed")
        let promotesTwo = try GroupChange.sign(group: Self.group, version: 1, previous: GroupState.noPrevious, author: "alice",
                                               operations: GroupOperations(add: ["alice", "bob"], promote: ["alice", "bob"], name: "T"),
                                               stateHash: state.hash, key: Self.key("alice"))
        #expect(code { try promotesTwo.verify(group: Self.group, authorKey: alice) } == "group_malformed")
        try genesis.verify(group: Self.group, authorKey: alice)
        #expect(GroupError.duplicateGenesis.code == "group_duplicate_genesis" && GroupError.keyChanged.code == "key_changed")
    }

    @Test func builderRefusesWhatTheFoldWouldNot() throws {
        var (_, state) = try Self.genesis(["alice", "bob", "carol", "dave"])
        (_, state) = try GroupChange.build(on: state, author: "alice", operations: GroupOperations(promote: ["bob"]), key: Self.key("alice"))
        func refusal(_ author: String, _ operations: GroupOperations) -> String? {
            do { _ = try GroupChange.build(on: state, author: author, operations: operations, key: Self.key(author)); return nil } catch {
                return error.code
            }
        }
        #expect(refusal("carol", GroupOperations(add: ["eve"])) == "group_not_allowed", "not an admin")
        #expect(refusal("bob", GroupOperations(remove: ["alice"])) == "group_not_allowed", "a junior removes a senior")
        #expect(refusal("bob", GroupOperations(demote: ["alice"])) == "group_not_allowed", "a junior demotes a senior")
        #expect(refusal("alice", GroupOperations(add: ["bob"])) == "group_not_allowed", "adding a member")
        #expect(refusal("alice", GroupOperations(remove: ["eve"])) == "group_not_allowed", "removing a non-member")
        #expect(refusal("alice", GroupOperations(promote: ["eve"])) == "group_not_allowed", "promoting a non-member")
        #expect(refusal("eve", .leave("eve")) == "group_not_allowed", "a non-member leaving")
        #expect(refusal("alice", GroupOperations(add: (1...1_000).map { "u\($0)" })) == "group_too_large")
        #expect(refusal("carol", .leave("carol")) == nil, "any member may leave")
        #expect(refusal("alice", GroupOperations(demote: ["bob"])) == nil)
        // The last admin: a plain leave is refused, one with a successor goes.
        let (_, alone) = try GroupChange.build(on: state, author: "alice", operations: GroupOperations(demote: ["bob"]), key: Self.key("alice"))
        #expect(throws: GroupError.self) { try GroupChange.build(on: alone, author: "alice", operations: .leave("alice"), key: Self.key("alice")) }
        let (_, succeeded) = try GroupChange.build(on: alone, author: "alice", operations: GroupOperations(remove: ["alice"], promote: ["bob"]),
                                                   key: Self.key("alice"))
        #expect(succeeded.admins == ["bob"] && !succeeded.isMember("alice"))
    }

    // MARK: Group messages

    @Test func groupMessages() throws {
        let (genesis, state) = try Self.genesis()
        let hash = Base64URL.encode(state.hash)
        func body(_ group: String, type: String = "text", payload: String = #""text":"hi""#) -> [UInt8] {
            Array(#"{"group":\#(group),"payload":{\#(payload)},"sender":{"id":"alice"},"timestamp":1800000000000,"type":"\#(type)"}"#.utf8)
        }
        let reference = #"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":1}"#
        let text = try ChatMessage.decode(body(reference))
        #expect(text.group == GroupReference(state))
        #expect(try ChatMessage.decode(try text.encoded()) == text)
        let plain = ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: "hi"), timestamp: 1, group: GroupReference(state))
        #expect(try ChatMessage.decode(try plain.encoded()).group == plain.group)
        let change = String(decoding: genesis.encoded(), as: UTF8.self)
        let message = try ChatMessage.decode(body(reference, type: "group_change", payload: #""group_change":\#(change)"#))
        #expect(message.type == .groupChange && message.payload.groupChange == genesis)
        #expect(try ChatMessage.decode(body(reference, type: "group_sync", payload: #""group_sync":{"from":0}"#)).payload.groupSync == GroupSync(from: 0))
        let history = try ChatMessage.decode(body(reference, type: "group_history", payload: #""group_history":{"changes":[\#(change)]}"#))
        #expect(history.payload.groupHistory == GroupHistory(changes: [genesis]))
        let refused: [(String, [UInt8])] = [
            ("version 0", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":0}"#)),
            ("version 2^53", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":9007199254740992}"#)),
            ("a state_hash of 42 characters", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash.dropLast())","version":1}"#)),
            ("a bad id", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVw","state_hash":"\#(hash)","version":1}"#)),
            ("no id", body(#"{"state_hash":"\#(hash)","version":1}"#)),
            ("group not an object", body(#""q0bV7pXx2yM4kQ8sT1uVwA""#)),
            ("group_change without its payload", body(reference, type: "group_change")),
            ("group_change without group", Array(#"{"payload":{"group_change":\#(change)},"sender":{"id":"alice"},"timestamp":1,"type":"group_change"}"#.utf8)),
            ("group_change of another version", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":2}"#, type: "group_change",
                                                     payload: #""group_change":\#(change)"#)),
            ("a malformed change", body(reference, type: "group_change", payload: #""group_change":{"author":"alice"}"#)),
            ("group_sync without its payload", body(reference, type: "group_sync")),
            ("group_sync from -1", body(reference, type: "group_sync", payload: #""group_sync":{"from":-1}"#)),
            ("group_history without changes", body(reference, type: "group_history", payload: #""group_history":{"changes":[]}"#)),
            ("group_history of 65 changes", body(reference, type: "group_history",
                                                 payload: #""group_history":{"changes":[\#(Array(repeating: change, count: 65).joined(separator: ","))]}"#)),
        ]
        for (what, bytes) in refused {
            #expect(throws: EnvelopeError.self, "\(what)") { _ = try ChatMessage.decode(bytes) }
            do { _ = try ChatMessage.decode(bytes) } catch { #expect(error.code == "envelope_invalid_body", "\(what)") }
        }
    }

    // MARK: The fold

    /// Folds `changes` from `start` in every given order (and reversed) and checks they agree.
    static func foldAll(_ start: GroupState, _ changes: [GroupChange]) -> GroupFold.Result {
        let result = GroupFold.fold(from: start, changes: changes)
        #expect(GroupFold.fold(from: start, changes: changes.reversed()) == result)
        #expect(GroupFold.fold(from: start, changes: changes + changes) == result, "duplicates count once")
        return result
    }

    /// spec/groups.md §3.4, the `race` vector.
    @Test func workedExample() throws {
        let (genesis, g1) = try Self.genesis()
        let a2 = try Self.change("alice", on: g1, GroupOperations(promote: ["bob"]))
        let s2 = GroupFold.fold(from: g1, changes: [a2]).state
        #expect(s2.admins == ["alice", "bob"])
        let a3 = try Self.change("alice", on: s2, GroupOperations(remove: ["carol"]))
        let b3 = try Self.change("bob", on: s2, GroupOperations(add: ["dave", "eve"], promote: ["dave"]))
        let c3 = try Self.change("carol", on: s2, .leave("carol"))
        let v3 = Self.foldAll(g1, [a2, a3, b3, c3])
        #expect(v3.state.members == ["alice", "bob", "dave", "eve"])
        #expect(v3.state.admins == ["alice", "bob", "dave"])
        #expect(v3.void.isEmpty && v3.accepted.count == 4)
        #expect(v3.state.hash.prefix(8) == [0x9d, 0x0c, 0x43, 0x6e, 0xd9, 0x9a, 0x66, 0x28], "the design's prototype's hash")
        // dave, welcomed by b3 with base s2, first folds only b3: carol stays.
        let daveFirst = GroupFold.fold(from: s2, changes: [b3])
        #expect(daveFirst.state.isMember("carol") && daveFirst.state.hash != v3.state.hash)
        #expect(GroupFold.fold(from: s2, changes: [b3, a3, c3, a2, genesis]).state == v3.state, "then the same state")
        // v4: alice demotes bob while bob removes dave: bob's change is void.
        let a4 = try Self.change("alice", on: v3.state, GroupOperations(demote: ["bob"]))
        let b4 = try Self.change("bob", on: v3.state, GroupOperations(remove: ["dave"]))
        let v4 = Self.foldAll(g1, [b4, a3, a4, c3, b3, a2])
        #expect(v4.state.admins == ["alice", "dave"] && v4.state.members == ["alice", "bob", "dave", "eve"])
        #expect(v4.void == [b4.id(group: Self.group)])
    }

    /// The cases of spec/groups.md §3.3.
    @Test func concurrencyCases() throws {
        var (_, g1) = try Self.genesis(["alice", "bob", "carol", "dave"])
        let p2 = try Self.change("alice", on: g1, GroupOperations(promote: ["bob"]))
        let s2 = GroupFold.fold(from: g1, changes: [p2]).state
        func fold(_ changes: GroupChange...) -> GroupFold.Result { Self.foldAll(g1, [p2] + changes) }

        // Different things at once: both apply.
        var r = fold(try Self.change("alice", on: s2, GroupOperations(add: ["eve"])), try Self.change("bob", on: s2, GroupOperations(remove: ["carol"])))
        #expect(r.state.members == ["alice", "bob", "dave", "eve"])
        // Two admins removing the same member at once: removed once (an add of a member is never authorised: see merge).
        r = fold(try Self.change("alice", on: s2, GroupOperations(remove: ["dave"])), try Self.change("bob", on: s2, GroupOperations(remove: ["dave"])))
        #expect(!r.state.isMember("dave"))
        let (withEve, _) = (try Self.change("bob", on: s2, GroupOperations(add: ["eve"])), ())
        r = fold(withEve, try Self.change("alice", on: s2, GroupOperations(name: "x")))
        #expect(r.state.isMember("eve") && r.state.name == "x")
        // Both rename: the senior's name.
        r = fold(try Self.change("bob", on: s2, GroupOperations(name: "Bob's")), try Self.change("alice", on: s2, GroupOperations(name: "Alice's")))
        #expect(r.state.name == "Alice's")
        // A junior removing or demoting a senior: void.
        let junior = try Self.change("bob", on: s2, GroupOperations(remove: ["alice"]))
        r = fold(junior)
        #expect(r.state.isMember("alice") && r.void == [junior.id(group: Self.group)] && r.state.version == 2, "an all-void version is skipped")
        #expect(fold(try Self.change("bob", on: s2, GroupOperations(demote: ["alice"]))).state.admins == ["alice", "bob"])
        // A non-admin's admin change: void; its leave: applies.
        #expect(fold(try Self.change("carol", on: s2, GroupOperations(add: ["eve"]))).state.members == ["alice", "bob", "carol", "dave"])
        #expect(fold(try Self.change("carol", on: s2, .leave("carol"))).state.members == ["alice", "bob", "dave"])
        // A leave is authorised even when a senior demotes its author at the same version.
        r = fold(try Self.change("alice", on: s2, GroupOperations(demote: ["bob"])), try Self.change("bob", on: s2, .leave("bob")))
        #expect(!r.state.isMember("bob") && r.state.admins == ["alice"])
        // A leave with a successor is an admin change: void under the senior's demotion.
        r = fold(try Self.change("alice", on: s2, GroupOperations(demote: ["bob"])),
                 try Self.change("bob", on: s2, GroupOperations(remove: ["bob"], promote: ["carol"])))
        #expect(r.state.isMember("bob") && r.state.admins == ["alice"])
        // Demotion over promotion.
        r = fold(try Self.change("alice", on: s2, GroupOperations(demote: ["bob"])), try Self.change("bob", on: s2, GroupOperations(promote: ["carol"])))
        #expect(r.state.admins == ["alice"], "bob lost authority first")
        // All admins leave at once: members without an admin, frozen.
        r = fold(try Self.change("alice", on: s2, .leave("alice")), try Self.change("bob", on: s2, .leave("bob")))
        #expect(r.state.admins.isEmpty && r.state.members == ["carol", "dave"])
        let frozen = try Self.change("carol", on: r.state, GroupOperations(add: ["eve"]))
        #expect(GroupFold.fold(from: r.state, changes: [frozen]).state == r.state)
        // The last member leaves: empty.
        var (_, solo) = try Self.genesis(["alice"])
        let last = try Self.change("alice", on: solo, .leave("alice"))
        #expect(GroupFold.fold(from: solo, changes: [last]).state.members.isEmpty)
        // The last admin leaves with a successor.
        (_, solo) = try Self.genesis(["alice", "bob", "carol"])
        #expect(GroupFold.fold(from: solo, changes: [try Self.change("alice", on: solo, GroupOperations(remove: ["alice"], promote: ["bob"]))]).state.admins == ["bob"])
        // A removed admin's later changes are void; a late change at an old version still applies.
        let r3 = try Self.change("alice", on: s2, GroupOperations(remove: ["bob"]))
        let s3 = GroupFold.fold(from: g1, changes: [p2, r3]).state
        let afterRemoval = try Self.change("bob", on: s3, GroupOperations(add: ["eve"]))
        #expect(!GroupFold.fold(from: g1, changes: [p2, r3, afterRemoval]).state.isMember("eve"))
        // At the removal's own version, the senior's removal voids bob's add (the seniority pass);
        // backdated to a version before the removal, it applies (§2.4) and the removal still holds.
        let concurrent = try Self.change("bob", on: s2, GroupOperations(add: ["eve"]))
        r = fold(r3, concurrent, afterRemoval)
        #expect(!r.state.isMember("eve") && !r.state.isMember("bob") && r.void.count == 2)
        let rename3 = try Self.change("alice", on: s2, GroupOperations(name: "n3"))
        let renamed = GroupFold.fold(from: g1, changes: [p2, rename3]).state
        let remove4 = try Self.change("alice", on: renamed, GroupOperations(remove: ["bob"]))
        r = fold(rename3, remove4, concurrent)
        #expect(r.state.isMember("eve") && !r.state.isMember("bob") && r.void.isEmpty, "a backdated add applies (§2.4), the removal holds")
        // The fold stops at a gap and says which version is missing.
        let s4 = GroupFold.fold(from: g1, changes: [p2, r3, try Self.change("alice", on: s3, GroupOperations(name: "n"))]).state
        let v5 = try Self.change("alice", on: s4, GroupOperations(add: ["eve"]))
        r = GroupFold.fold(from: g1, changes: [p2, r3, v5])
        #expect(r.state == s3 && r.missingVersion == 4 && r.waiting == [v5.id(group: Self.group)])
        // Changes at or below a joiner's origin are before its history.
        r = GroupFold.fold(from: s2, changes: [p2])
        #expect(r.state == s2 && r.beforeHistory == [p2.id(group: Self.group)])
        // Equivocation: two changes of one author at one version both apply.
        r = fold(try Self.change("alice", on: s2, GroupOperations(add: ["eve"])), try Self.change("alice", on: s2, GroupOperations(remove: ["carol"])))
        #expect(r.state.members == ["alice", "bob", "dave", "eve"])
        g1 = s2
    }

    /// A full group is made in one change: its genesis names 1,000 members and the creator again
    /// as admin (1,001 uids); one member more is refused.
    @Test func aFullGroupIsCreatedInOneChange() throws {
        let others = (1...999).map { String(format: "m%04d", $0) }
        let (genesis, state) = try GroupChange.genesis(group: Self.group, name: "full", creator: "alice", members: others, key: Self.key("alice"))
        #expect(state.members.count == GroupLimits.maxMembers)
        try genesis.verify(group: Self.group, authorKey: Self.key("alice").publicKey)
        #expect(throws: GroupError.self) {
            try GroupChange.genesis(group: Self.group, name: "over", creator: "alice", members: others + ["m1000"], key: Self.key("alice"))
        }
    }

    @Test func capDropsAdds() throws {
        let members = (1...998).map { String(format: "m%04d", $0) }
        let (_, g1) = try GroupChange.genesis(group: Self.group, name: "big", creator: "alice", members: members, key: Self.key("alice"))
        #expect(g1.members.count == 999)
        let p2 = try Self.change("alice", on: g1, GroupOperations(promote: ["m0001"]))
        let s2 = GroupFold.fold(from: g1, changes: [p2]).state
        let a3 = try Self.change("alice", on: s2, GroupOperations(add: ["x1", "x3"]))
        let b3 = try Self.change("m0001", on: s2, GroupOperations(add: ["x2"], remove: ["m0500"], promote: ["x2"]))
        let r = Self.foldAll(g1, [p2, a3, b3])
        #expect(r.state.members.count == 998 && !r.state.isMember("x1") && !r.state.isMember("x2") && !r.state.isMember("m0500"),
                "1,001 members: the adds are dropped, the removal holds")
        #expect(r.state.admins == ["alice", "m0001"])
        #expect(r.accepted.count == 3 && r.state.version == 3)
    }

    /// The fold depends only on the set of changes: seeded random histories of admins, members
    /// and outsiders making concurrent changes, each folded in several orders.
    @Test func foldIsOrderIndependent() throws {
        var random = SeededRandom(seed: 0x6d61_696c_736c_6f74)
        let people = (0..<20).map { "u\($0)" }
        for _ in 0..<150 {
            let founders = Array(people.shuffled(using: &random).prefix(8))
            let (genesis, g1) = try GroupChange.genesis(group: Self.group, name: "g", creator: founders[0], members: founders, key: Self.key(founders[0]))
            var changes = [genesis]
            var tip = g1
            for _ in 0..<6 {  // versions
                let concurrent = Int.random(in: 1...3, using: &random)
                var made: [GroupChange] = []
                for _ in 0..<concurrent {
                    made.append(try Self.randomChange(on: tip, people: people, using: &random))
                }
                changes += made
                let step = GroupFold.fold(from: g1, changes: changes)
                tip = step.state.version == tip.version + 1 ? step.state : (try GroupState(id: tip.id, version: tip.version + 1, previous: tip.hash, name: tip.name, members: tip.members, admins: tip.admins))
            }
            let reference = GroupFold.fold(from: g1, changes: changes)
            for _ in 0..<4 {
                #expect(GroupFold.fold(from: g1, changes: changes.shuffled(using: &random)) == reference)
            }
            let state = reference.state
            #expect(state.admins.allSatisfy(state.isMember), "admins ⊆ members")
            let distinct = Set(changes.map { $0.id(group: Self.group) })
            #expect(reference.accepted.count + reference.void.count + reference.waiting.count + reference.beforeHistory.count == distinct.count)
            // A member removed at a version is never in that version's state.
            for version in reference.states {
                for change in changes where change.version == version.version && reference.accepted.contains(change.id(group: Self.group)) {
                    for uid in change.operations.remove ?? [] { #expect(!version.isMember(uid)) }
                }
            }
        }
    }

    /// A change by a random person on `state`: mostly plausible (an admin acting within its
    /// rights, a member leaving), sometimes not (an outsider, a junior against a senior).
    static func randomChange(on state: GroupState, people: [String], using random: inout SeededRandom) throws -> GroupChange {
        let author = Bool.random(using: &random) && !state.admins.isEmpty ? state.admins.randomElement(using: &random)! : people.randomElement(using: &random)!
        let outsiders = people.filter { !state.isMember($0) }
        var operations: GroupOperations
        switch Int.random(in: 0..<7, using: &random) {
        case 0: operations = GroupOperations(add: Array(outsiders.shuffled(using: &random).prefix(2)))
        case 1: operations = GroupOperations(remove: [state.members.randomElement(using: &random) ?? author])
        case 2: operations = GroupOperations(promote: [state.members.randomElement(using: &random) ?? author])
        case 3: operations = GroupOperations(demote: [state.admins.randomElement(using: &random) ?? author])
        case 4: operations = GroupOperations(name: "n\(Int.random(in: 0..<5, using: &random))")
        case 5: operations = .leave(author)
        default:
            let new = outsiders.randomElement(using: &random)
            operations = GroupOperations(add: new.map { [$0] }, promote: new.map { [$0] }, name: new == nil ? "x" : nil)
        }
        if (try? operations.check()) == nil { operations = .leave(author) }
        return try change(author, on: state, operations)
    }
}

/// SplitMix64: a seeded generator, so a failing history can be replayed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
