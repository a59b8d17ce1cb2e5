import Foundation
import Testing
@testable import MailslotCrypto

/// `spec/vectors/groups.json` (spec/groups.md §6): state bytes and hashes, change bytes,
/// signatures and verification outcomes, folds of concurrent changes in several orders, and group
/// message bodies. Written with `MAILSLOT_WRITE_VECTORS=1`, checked always.
extension SpecVectorTests {
    static let groupSeeds: [String: [UInt8]] = ["alice": bytes(0xA1), "bob": bytes(0xB0), "carol": bytes(0xC0), "dave": bytes(0xD0), "eve": bytes(0xE0)]

    static func groupHex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
    static func utf8String(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
    static func groupKey(_ uid: String) -> IdentityKeyPair { GroupTests.key(uid) }

    static func groupStateCases() throws -> (ok: [[String: Any]], refused: [[String: Any]]) {
        let group = GroupTests.group
        let (_, genesis) = try GroupTests.genesis()
        let v2 = GroupFold.fold(from: genesis, changes: [try GroupTests.change("alice", on: genesis, GroupOperations(promote: ["bob"]))]).state
        let states: [(String, GroupState)] = [
            ("genesis", genesis),
            ("version_2", v2),
            ("name_unicode", try GroupState(id: group, version: 5, previous: v2.hash, name: "Zoë's \"trip\" \\ 🎉 旅行", members: ["alice", "bob"], admins: ["bob", "alice"])),
            ("byte_order", try GroupState(id: group, version: 3, previous: v2.hash, name: "order", members: ["Zoe", "alice", "alice.b", "alice_b"], admins: ["alice_b", "Zoe"])),
            ("no_admin", try GroupState(id: group, version: 7, previous: v2.hash, name: "frozen", members: ["carol", "dave"], admins: [])),
            ("empty", try GroupState(id: group, version: 8, previous: v2.hash, name: "over", members: [], admins: [])),
            ("thousand_members", try GroupState(id: group, version: 2, previous: genesis.hash, name: "big",
                                                members: (1...1_000).map { String(format: "member-%04d", $0) }, admins: ["member-0001"])),
        ]
        let ok = states.map { name, state -> [String: Any] in
            ["name": name, "state": utf8String(state.encoded()), "state_bytes": groupHex(state.canonicalBytes), "state_hash": Base64URL.encode(state.hash),
             "json_length": state.encodedCount]
        }
        let base = #""id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1"#
        let refused: [(String, String)] = [
            ("unsorted", #"{"admins":[],"members":["bob","alice"],\#(base)}"#),
            ("repeated", #"{"admins":[],"members":["alice","alice"],\#(base)}"#),
            ("admin_not_member", #"{"admins":["carol"],"members":["alice","bob"],\#(base)}"#),
            ("admin_twice", #"{"admins":["alice","alice"],"members":["alice"],\#(base)}"#),
            ("name_control", #"{"admins":[],"members":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"a\u0007b","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#),
            ("name_empty", #"{"admins":[],"members":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#),
            ("members_1001", #"{"admins":[],"members":[\#((0...1_000).map { String(format: "\"m%04d\"", $0) }.joined(separator: ","))],\#(base)}"#),
            ("previous_31_bytes", #"{"admins":[],"members":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#),
            ("version_0", #"{"admins":[],"members":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"x","previous":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":0}"#),
            ("version_1_with_previous", #"{"admins":[],"members":["alice"],"id":"q0bV7pXx2yM4kQ8sT1uVwA","name":"x","previous":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","version":1}"#),
            ("invalid_uid", #"{"admins":[],"members":["a b"],\#(base)}"#),
            ("over_48_kib", #"{"admins":[],"members":[\#((1...1_000).map { "\"" + String(format: "%049d", $0) + "\"" }.joined(separator: ","))],\#(base)}"#),
        ]
        return (ok, refused.map { ["name": $0.0, "state": $0.1, "expect": "group_malformed"] })
    }

    static func groupChangeCases() throws -> [[String: Any]] {
        let group = GroupTests.group
        let (genesis, g1) = try GroupTests.genesis()
        let (add, s2) = try GroupChange.build(on: g1, author: "alice", operations: GroupOperations(add: ["dave"]), key: groupKey("alice"))
        let (leave, _) = try GroupChange.build(on: s2, author: "carol", operations: .leave("carol"), key: groupKey("carol"))
        let (rename, _) = try GroupChange.build(on: s2, author: "alice", operations: GroupOperations(name: "Trip 2026 ✈"), key: groupKey("alice"))
        let (addPromote, _) = try GroupChange.build(on: s2, author: "alice", operations: GroupOperations(add: ["eve"], promote: ["eve"]), key: groupKey("alice"))
        func json(_ change: GroupChange, _ edit: (inout [String: Any]) -> Void = { _ in }) throws -> String {
            var object = try JSONSerialization.jsonObject(with: Data(change.encoded())) as! [String: Any]
            edit(&object)
            return utf8String(Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])))
        }
        var cases: [(String, String, String, String)] = [  // name, change JSON, author whose key verifies, expect
            ("genesis", try json(genesis), "alice", "ok"),
            ("add", try json(add), "alice", "ok"),
            ("add_with_base", try json(add.with(base: g1)), "alice", "ok"),
            ("leave", try json(leave), "carol", "ok"),
            ("rename", try json(rename), "alice", "ok"),
            ("add_and_promote", try json(addPromote), "alice", "ok"),
            ("ops_byte_changed", try json(add) { $0["ops"] = ["add": ["davf"]] }, "alice", "group_bad_signature"),
            ("signed_by_bob_as_alice", try json(try GroupChange.sign(group: group, version: 2, previous: g1.hash, author: "alice",
                                                                     operations: GroupOperations(promote: ["bob"]), stateHash: s2.hash, key: groupKey("bob"))),
             "alice", "group_bad_signature"),
            ("unsorted_add", try json(add) { $0["ops"] = ["add": ["eve", "dave"]] }, "alice", "group_malformed"),
            ("add_and_remove", try json(add) { $0["ops"] = ["add": ["dave"], "remove": ["dave"]] }, "alice", "group_malformed"),
            ("no_ops", try json(add) { $0["ops"] = [String: Any]() }, "alice", "group_malformed"),
            ("empty_list", try json(add) { $0["ops"] = ["add": [String](), "name": "x"] }, "alice", "group_malformed"),
            ("unknown_op", try json(add) { $0["ops"] = ["add": ["dave"], "ban": ["carol"]] }, "alice", "group_malformed"),
            ("version_0", try json(add) { $0["version"] = 0 }, "alice", "group_malformed"),
            ("genesis_without_author", try json(try GroupChange.sign(group: group, version: 1, previous: GroupState.noPrevious, author: "alice",
                                                                     operations: GroupOperations(add: ["bob", "carol"], promote: ["alice"], name: "Trip"),
                                                                     stateHash: g1.hash, key: groupKey("alice"))), "alice", "group_malformed"),
            ("bad_base_other_state", try json(add.with(base: s2)), "alice", "group_bad_base"),
            ("bad_base_hash", try json(add.with(base: try GroupTests.genesis(["alice", "bob"]).state)), "alice", "group_bad_base"),
            ("bad_base_not_a_state", try json(add.with(base: g1)) { object in
                var base = object["base"] as! [String: Any]
                base["admins"] = ["zed"]
                object["base"] = base
            }, "alice", "group_bad_base"),
        ]
        cases.append(("bad_signature_before_bad_base", try json(add.with(base: s2)) { $0["ops"] = ["add": ["davf"]] }, "alice", "group_bad_signature"))
        return cases.map { name, change, author, expect in
            var vector: [String: Any] = ["name": name, "group": group.rawValue, "change": change, "author_key": Base64URL.encode(groupKey(author).publicKey.bytes),
                                         "expect": expect]
            if let decoded = try? GroupChange.decode(Array(change.utf8)) {
                vector["change_bytes"] = groupHex(decoded.signedBytes(group: group))
                vector["change_id"] = Base64URL.encode(decoded.id(group: group))
            }
            return vector
        }
    }

    static func groupFoldCases() throws -> [[String: Any]] {
        let group = GroupTests.group
        func change(_ author: String, _ state: GroupState, _ operations: GroupOperations) throws -> GroupChange {
            try GroupTests.change(author, on: state, operations)
        }
        var cases: [[String: Any]] = []
        func add(_ name: String, _ start: GroupState, _ changes: [GroupChange]) {
            let result = GroupFold.fold(from: start, changes: changes)
            let n = changes.count
            let orders: [[Int]] = [Array(0..<n), Array((0..<n).reversed()), (0..<n).map { ($0 * 7 + 3) % n }].reduce(into: []) { all, order in
                if Set(order).count == n, !all.contains(order) { all.append(order) }
            }
            cases.append(["name": name, "start": utf8String(start.encoded()), "changes": changes.map { utf8String($0.encoded()) },
                          "orders": orders, "state": utf8String(result.state.encoded()), "state_hash": Base64URL.encode(result.state.hash),
                          "void": result.void.map { Base64URL.encode($0) }.sorted()])
        }
        let (_, g1) = try GroupTests.genesis()
        let a2 = try change("alice", g1, GroupOperations(promote: ["bob"]))
        let s2 = GroupFold.fold(from: g1, changes: [a2]).state
        // §3.4: race at v3, then the demotion race at v4.
        let a3 = try change("alice", s2, GroupOperations(remove: ["carol"]))
        let b3 = try change("bob", s2, GroupOperations(add: ["dave", "eve"], promote: ["dave"]))
        let c3 = try change("carol", s2, .leave("carol"))
        let s3 = GroupFold.fold(from: g1, changes: [a2, a3, b3, c3]).state
        let a4 = try change("alice", s3, GroupOperations(demote: ["bob"]))
        let b4 = try change("bob", s3, GroupOperations(remove: ["dave"]))
        add("race", g1, [a2, a3, b3, c3, a4, b4])
        add("race_joiner", s2, [b3, a3, c3])
        add("add_then_remove", g1, [a2, try change("alice", s2, GroupOperations(add: ["dave"])), try change("bob", s2, GroupOperations(name: "x")),
                                    try change("alice", s3, GroupOperations(remove: ["dave"])), try change("bob", s3, GroupOperations(add: ["carol"]))])
        add("promote_vs_remove", g1, [a2, try change("alice", s2, GroupOperations(remove: ["carol"])), try change("bob", s2, GroupOperations(promote: ["carol"]))])
        add("rename_both", g1, [a2, try change("bob", s2, GroupOperations(name: "Bob's")), try change("alice", s2, GroupOperations(name: "Alice's"))])
        add("demote_vs_act", g1, [a2, try change("alice", s2, GroupOperations(demote: ["bob"])), try change("bob", s2, GroupOperations(add: ["eve"]))])
        add("junior_removes_senior", g1, [a2, try change("bob", s2, GroupOperations(remove: ["alice"]))])
        add("last_admin_leaves", g1, [try change("alice", g1, GroupOperations(remove: ["alice"], promote: ["bob"]))])
        add("all_admins_leave", g1, [a2, try change("alice", s2, .leave("alice")), try change("bob", s2, .leave("bob"))])
        // late_change: v3 arriving after v6 — the same state as in order.
        var tip = s3
        var chain = [a2, a3, b3, c3]
        for (author, operations) in [("alice", GroupOperations(name: "v4")), ("alice", GroupOperations(add: ["carol"])), ("dave", GroupOperations(remove: ["eve"]))] {
            let next = try change(author, tip, operations)
            chain.append(next)
            tip = GroupFold.fold(from: g1, changes: chain).state
        }
        let late = try change("bob", s2, GroupOperations(name: "late"))
        add("late_change", g1, chain + [late])
        let r3 = try change("alice", s2, GroupOperations(remove: ["bob"]))
        let afterRemoval = GroupFold.fold(from: g1, changes: [a2, r3]).state
        add("removed_admin_later", g1, [a2, r3, try change("bob", afterRemoval, GroupOperations(add: ["eve"]))])
        add("removed_at_same_version", g1, [a2, r3, try change("bob", s2, GroupOperations(add: ["eve"]))])
        let rename3 = try change("alice", s2, GroupOperations(name: "n3"))
        let renamed = GroupFold.fold(from: g1, changes: [a2, rename3]).state
        add("backdated_add", g1, [a2, rename3, try change("alice", renamed, GroupOperations(remove: ["bob"])),
                                  try change("bob", s2, GroupOperations(add: ["eve"]))])
        add("equivocation", g1, [a2, try change("alice", s2, GroupOperations(add: ["eve"])), try change("alice", s2, GroupOperations(remove: ["carol"]))])
        add("gap", g1, [a2, try change("alice", s3, GroupOperations(name: "after a gap"))])
        let (_, big) = try GroupChange.genesis(group: group, name: "big", creator: "alice", members: (1...998).map { String(format: "m%04d", $0) },
                                               key: groupKey("alice"))
        let bigA = try change("alice", big, GroupOperations(promote: ["m0001"]))
        let big2 = GroupFold.fold(from: big, changes: [bigA]).state
        add("cap", big, [bigA, try change("alice", big2, GroupOperations(add: ["x1", "x3"])),
                         try change("m0001", big2, GroupOperations(add: ["x2"], remove: ["m0500"], promote: ["x2"]))])
        return cases
    }

    static func groupMessageCases() throws -> [[String: Any]] {
        let (genesis, g1) = try GroupTests.genesis()
        let hash = Base64URL.encode(g1.hash)
        func body(_ group: String, type: String = "text", payload: String = #""text":"hi""#) -> String {
            #"{"group":\#(group),"payload":{\#(payload)},"sender":{"id":"alice"},"timestamp":1800000000000,"type":"\#(type)"}"#
        }
        let reference = #"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":1}"#
        let change = utf8String(genesis.encoded())
        return [
            ("text", body(reference), "ok"),
            ("group_change", body(reference, type: "group_change", payload: #""group_change":\#(change)"#), "ok"),
            ("group_sync", body(reference, type: "group_sync", payload: #""group_sync":{"from":0}"#), "ok"),
            ("group_history", body(reference, type: "group_history", payload: #""group_history":{"base":\#(utf8String(g1.encoded())),"changes":[\#(change)]}"#), "ok"),
            ("version_0", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":0}"#), "envelope_invalid_body"),
            ("state_hash_42", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash.dropLast())","version":1}"#), "envelope_invalid_body"),
            ("group_change_without_payload", body(reference, type: "group_change"), "envelope_invalid_body"),
            ("group_change_other_version", body(#"{"id":"q0bV7pXx2yM4kQ8sT1uVwA","state_hash":"\#(hash)","version":2}"#, type: "group_change",
                                                payload: #""group_change":\#(change)"#), "envelope_invalid_body"),
            ("group_history_empty", body(reference, type: "group_history", payload: #""group_history":{"changes":[]}"#), "envelope_invalid_body"),
        ].map { ["name": $0.0, "body": $0.1, "expect": $0.2] }
    }

    @Test func groups() throws {
        let states = try Self.groupStateCases()
        let generated: [String: Any] = [
            "description": "Groups (spec/groups.md §6): state bytes and hashes, change bytes and verification, folds of concurrent changes in several orders, group message bodies.",
            "seeds": Dictionary(uniqueKeysWithValues: Self.groupSeeds.map { ($0.key, Base64URL.encode($0.value)) }),
            "group": GroupTests.group.rawValue,
            "states": states.ok, "refused_states": states.refused,
            "changes": try Self.groupChangeCases(), "folds": try Self.groupFoldCases(), "messages": try Self.groupMessageCases(),
        ]
        if Self.writing { try Self.write("groups.json", generated) }
        let vectors = try Self.read("groups.json")
        #expect(try Self.same(generated, vectors), "groups.json is what the generator makes from the published seeds")
        for (uid, seed) in Self.groupSeeds { #expect(GroupTests.key(uid).publicKey == IdentityKeyPair(seed: SecretBytes(copying: seed)).publicKey) }
        let group = try #require(GroupID(rawValue: vectors["group"] as! String))

        for vector in try #require(vectors["states"] as? [[String: Any]]) {
            let state = try GroupState.decode(Array((vector["state"] as! String).utf8))
            #expect(Self.groupHex(state.canonicalBytes) == vector["state_bytes"] as? String)
            #expect(Base64URL.encode(state.hash) == vector["state_hash"] as? String)
            #expect(Self.utf8String(state.encoded()) == vector["state"] as? String)
        }
        for vector in try #require(vectors["refused_states"] as? [[String: Any]]) {
            do {
                _ = try GroupState.decode(Array((vector["state"] as! String).utf8))
                Issue.record("\(vector["name"]!) decoded")
            } catch {
                #expect(error.code == vector["expect"] as? String, "\(vector["name"]!)")
            }
        }
        let changes = try #require(vectors["changes"] as? [[String: Any]])
        #expect(changes.count >= 15)
        for vector in changes {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            let key = try #require(IdentityPublicKey(bytes: Base64URL.decode(vector["author_key"] as! String) ?? []))
            do {
                let change = try GroupChange.decode(Array((vector["change"] as! String).utf8))
                #expect(Self.groupHex(change.signedBytes(group: group)) == vector["change_bytes"] as? String, "\(name)")
                #expect(Base64URL.encode(change.id(group: group)) == vector["change_id"] as? String, "\(name)")
                try change.verify(group: group, authorKey: key)
                #expect(expect == "ok", "\(name)")
            } catch {
                #expect(error.code == expect, "\(name)")
            }
        }
        let folds = try #require(vectors["folds"] as? [[String: Any]])
        #expect(folds.count >= 14)
        for vector in folds {
            let name = vector["name"] as! String
            let start = try GroupState.decode(Array((vector["start"] as! String).utf8))
            let changes = try (vector["changes"] as! [String]).map { try GroupChange.decode(Array($0.utf8)) }
            for change in changes { try change.verify(group: group, authorKey: GroupTests.key(change.author).publicKey) }
            for order in vector["orders"] as! [[Int]] {
                let result = GroupFold.fold(from: start, changes: order.map { changes[$0] })
                #expect(Self.utf8String(result.state.encoded()) == vector["state"] as? String, "\(name)")
                #expect(Base64URL.encode(result.state.hash) == vector["state_hash"] as? String, "\(name)")
                #expect(result.void.map { Base64URL.encode($0) }.sorted() == vector["void"] as? [String], "\(name)")
            }
        }
        for vector in try #require(vectors["messages"] as? [[String: Any]]) {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            do {
                _ = try ChatMessage.decode(Array((vector["body"] as! String).utf8))
                #expect(expect == "ok", "\(name)")
            } catch {
                #expect(error.code == expect, "\(name)")
            }
        }
    }
}
