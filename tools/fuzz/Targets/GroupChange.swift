// Fuzz target `group-change`: the group formats of spec/groups.md (Sources/MailslotCrypto/Formats/
// GroupState.swift, GroupChange.swift, GroupFold.swift) as a member reads them. The first input
// byte picks a mode:
//   0  a change's JSON: GroupChange.decode, then verify under the fixed author keys; whatever
//      decodes must encode and decode back to the same change.
//   1  a state's JSON: GroupState.decode; whatever decodes must write one JSON form, of the
//      length it reports, that reads back to the same state.
//   2  changes' JSON, one per line, folded onto a fixed state: the fold must not crash and must
//      give the same result in the input's order, reversed, and rotated.
//   3  a program of signed changes: each 4 bytes pick an author, a version offset and an
//      operation on uids of a small pool; the harness signs them with fixed keys (so the fold
//      sees valid changes) and folds them in three orders, which must agree.
//   4  a chat body: ChatMessage.decode with the `group` member and the group_* types; what
//      decodes must encode and decode back equal.

import Foundation
import MailslotWire

private let group = GroupID(rawValue: "q0bV7pXx2yM4kQ8sT1uVwA")!
private let people = ["alice", "bob", "carol", "dave", "eve", "frank"]
private let keys: [String: IdentityKeyPair] = Dictionary(uniqueKeysWithValues: people.enumerated().map { index, uid in
    (uid, IdentityKeyPair(seed: SecretBytes(copying: [UInt8](repeating: UInt8(0xA1 + index), count: 32))))
})

/// alice's group of alice, bob, carol with bob promoted: version 2.
private let start: GroupState = {
    guard let (_, genesis) = try? GroupChange.genesis(group: group, name: "Trip", creator: "alice", members: ["bob", "carol"], key: keys["alice"]!),
          let (_, promoted) = try? GroupChange.build(on: genesis, author: "alice", operations: GroupOperations(promote: ["bob"]), key: keys["alice"]!) else {
        fatalError("the fixed group does not build")
    }
    return promoted
}()

private func checkFold(_ changes: [GroupChange]) {
    let result = GroupFold.fold(from: start, changes: changes)
    expect(GroupFold.fold(from: start, changes: changes.reversed()) == result, "the fold depends on the order (reversed)")
    if changes.count > 2 {
        let rotated = Array(changes[(changes.count / 2)...] + changes[..<(changes.count / 2)])
        expect(GroupFold.fold(from: start, changes: rotated) == result, "the fold depends on the order (rotated)")
    }
    let state = result.state
    expect(state.admins.allSatisfy(state.isMember), "an admin who is not a member")
    expect(state.encoded().count == state.encodedCount, "the state's JSON length")
    expect(state.version >= start.version, "the fold went back")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func groupChangeOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 5 {
    case 0:
        guard let change = try? GroupChange.decode(rest) else { return 0 }
        let again = try? GroupChange.decode(change.encoded())
        expect(again?.signedBytes(group: group) == change.signedBytes(group: group) && again?.base == change.base,
               "a change does not round-trip")
        for key in keys.values { _ = try? change.verify(group: group, authorKey: key.publicKey) }
        _ = try? change.checkGenesis()
    case 1:
        guard let state = try? GroupState.decode(rest) else { return 0 }
        let json = state.encoded()
        expect(json.count == state.encodedCount, "the state's JSON length")
        expect((try? GroupState.decode(json)) == state, "a state does not round-trip")
        expect(state.canonicalBytes.count > 8 && state.hash.count == 32, "canonical bytes")
    case 2:
        let lines = rest.split(separator: UInt8(ascii: "\n"), maxSplits: 64, omittingEmptySubsequences: true)
        checkFold(lines.compactMap { try? GroupChange.decode(Array($0)) })
    case 3:
        var changes: [GroupChange] = []
        var tip = start
        for chunk in stride(from: 0, to: min(rest.count, 4 * 24), by: 4) where chunk + 3 < rest.count {
            let author = people[Int(rest[chunk]) % people.count]
            let target = people[Int(rest[chunk + 2]) % people.count], other = people[Int(rest[chunk + 3]) % people.count]
            let operations: GroupOperations
            switch rest[chunk + 1] % 8 {
            case 0: operations = GroupOperations(add: [target, other])
            case 1: operations = GroupOperations(remove: [target])
            case 2: operations = GroupOperations(promote: [target])
            case 3: operations = GroupOperations(demote: [target])
            case 4: operations = GroupOperations(name: "n\(rest[chunk + 3] % 4)")
            case 5: operations = .leave(author)
            case 6: operations = GroupOperations(add: [target], promote: [target])
            default: operations = GroupOperations(remove: [author], promote: [target])
            }
            // Bit 4 of the op byte: build on the tip; otherwise concurrent with the last change.
            let base = rest[chunk + 1] & 0x10 != 0 ? tip : GroupFold.fold(from: start, changes: Array(changes.dropLast())).state
            guard base.version < GroupLimits.maxVersion,
                  let change = try? GroupChange.sign(group: group, version: base.version + 1, previous: base.hash, author: author,
                                                     operations: operations, stateHash: base.hash, key: keys[author]!) else { continue }
            expect((try? change.verify(group: group, authorKey: keys[author]!.publicKey)) != nil, "a signed change does not verify")
            changes.append(change)
            tip = GroupFold.fold(from: start, changes: changes).state
        }
        checkFold(changes)
    default:
        guard let message = try? ChatMessage.decode(rest), let encoded = try? message.encoded() else { return 0 }
        let again = try? ChatMessage.decode(encoded)
        expect(again?.group == message.group && again?.type == message.type, "a group message does not round-trip")
        expect(again?.payload.groupSync == message.payload.groupSync && again?.payload.groupHistory?.changes.count == message.payload.groupHistory?.changes.count,
               "a group payload does not round-trip")
    }
    return 0
}

/// The vectors of spec/vectors/groups.json in each mode, and structured programs.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(String, [UInt8])] = []
    let url = URL(fileURLWithPath: root).appendingPathComponent("spec/vectors/groups.json")
    guard let data = try? Data(contentsOf: url), let vectors = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
        fatalError("spec/vectors/groups.json does not read")
    }
    for vector in vectors["changes"] as? [[String: Any]] ?? [] {
        let text = vector["change"] as! String, expect = vector["expect"] as! String
        // A stale harness must stop: every change vector has the outcome it expects.
        let outcome: String
        do {
            let key = IdentityPublicKey(bytes: Base64URL.decode(vector["author_key"] as! String) ?? [])
            try GroupChange.decode(Array(text.utf8)).verify(group: group, authorKey: key)
            outcome = "ok"
        } catch {
            outcome = error.code
        }
        if outcome != expect { fatalError("change vector \(vector["name"]!): \(outcome), expected \(expect)") }
        seeds.append(("change-\(vector["name"]!)", [0] + Array(text.utf8)))
    }
    for vector in (vectors["states"] as? [[String: Any]] ?? []) + (vectors["refused_states"] as? [[String: Any]] ?? []) {
        seeds.append(("state-\(vector["name"]!)", [1] + Array((vector["state"] as! String).utf8)))
    }
    for vector in vectors["folds"] as? [[String: Any]] ?? [] {
        let changes = (vector["changes"] as! [String]).joined(separator: "\n")
        seeds.append(("fold-\(vector["name"]!)", [2] + Array(changes.utf8)))
    }
    for vector in vectors["messages"] as? [[String: Any]] ?? [] {
        seeds.append(("message-\(vector["name"]!)", [4] + Array((vector["body"] as! String).utf8)))
    }
    if seeds.count < 40 { fatalError("spec/vectors/groups.json has too few cases") }
    var program: [UInt8] = [3]
    for index in 0..<24 { program += [UInt8(index * 5 % 6), UInt8(index * 7 % 16), UInt8(index * 3 % 6), UInt8(index % 6)] }
    seeds.append(("program", program))
    return seeds
}
