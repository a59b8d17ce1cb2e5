import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// One-time prekeys over HTTP (spec/protocol.md §4.14): upload, count, claim, withdraw; every
/// refusal code; the claim limits; the `ready` frame's count.
@Suite struct PrekeyTests {
    /// `count` fresh prekeys with ids from `first`.
    static func prekeys(_ count: Int, from first: UInt32 = 1) -> [Prekey] {
        (0..<UInt32(count)).map { Prekey(id: first + $0, key: MailboxKeyPair().publicKey) }
    }

    /// Bob's upload of `prekeys`.
    static func upload(_ relay: TestRelay, _ prekeys: [Prekey], as session: String, to uid: String = "bob") async throws -> TestRelay.Answer {
        try await relay.call("POST", "/v1/users/\(uid)/prekeys", session: session, json: PrekeyUpload(prekeys: prekeys))
    }

    static func count(_ relay: TestRelay, _ session: String, of uid: String = "bob") async throws -> Int? {
        let answer = try await relay.call("GET", "/v1/users/\(uid)/prekeys", session: session)
        return answer.status == 200 ? try answer.decoded(PrekeyCount.self).count : nil
    }

    static func claim(_ relay: TestRelay, _ session: String, of uid: String = "bob", body: Any? = [String: Any]()) async throws -> TestRelay.Answer {
        try await relay.call("POST", "/v1/users/\(uid)/prekeys/claim", session: session, body: body)
    }

    @Test func uploadCountClaimAndWithdraw() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            let prekeys = Self.prekeys(3, from: 10)
            let uploaded = try await Self.upload(relay, prekeys.reversed(), as: bob)
            #expect(uploaded.status == 200)
            #expect(try uploaded.decoded(PrekeyCount.self) == PrekeyCount(count: 3))
            #expect(try await Self.upload(relay, prekeys, as: bob).json["count"] as? Int == 3, "a retry is answered and adds nothing")
            #expect(try await Self.count(relay, bob) == 3)

            // Lowest id first; the body may be `{}` or absent; the owner may claim too.
            let first = try await Self.claim(relay, alice)
            #expect(first.status == 200)
            #expect(try first.decoded(PrekeyClaim.self).prekey == prekeys[0])
            #expect(try await Self.claim(relay, alice, body: nil).decoded(PrekeyClaim.self).prekey == prekeys[1])
            #expect(try await Self.count(relay, bob) == 1)
            #expect(try await Self.claim(relay, bob).decoded(PrekeyClaim.self).prekey == prekeys[2])
            let empty = try await Self.claim(relay, alice)
            #expect(empty.status == 200)
            #expect(empty.text == #"{"prekey":null}"#, "none left is said, not left out")
            #expect(try await Self.count(relay, bob) == 0)

            #expect(try await Self.upload(relay, Self.prekeys(2), as: bob).json["count"] as? Int == 2)
            #expect(try await relay.call("DELETE", "/v1/users/bob/prekeys", session: bob).status == 204)
            #expect(try await Self.count(relay, bob) == 0)
            #expect(try await relay.call("DELETE", "/v1/users/bob/prekeys", session: bob).status == 204, "withdrawing none is no error")
            #expect(try await Self.claim(relay, alice).decoded(PrekeyClaim.self).prekey == nil)
        }
    }

    @Test func uploadsAreCheckedAndRefusedWhole() async throws {
        try await withTestRelay(configure: { $0.maxPrekeys = 4 }) { relay in
            let bob = try await relay.signIn("bob").session
            let good = Base64URL.encode(MailboxKeyPair().publicKey.bytes)
            func upload(_ body: Any) async throws -> TestRelay.Answer {
                try await relay.call("POST", "/v1/users/bob/prekeys", session: bob, body: body)
            }
            let invalid: [(String, Any)] = [
                ("no entries", ["prekeys": [Any]()]),
                ("too many entries", ["prekeys": (1...101).map { ["id": $0, "key": good] }]),
                ("id 0", ["prekeys": [["id": 0, "key": good]]]),
                ("a repeated id", ["prekeys": [["id": 1, "key": good], ["id": 1, "key": good]]]),
                ("31 bytes", ["prekeys": [["id": 1, "key": Base64URL.encode(randomBytes(31))]]]),
                ("33 bytes", ["prekeys": [["id": 1, "key": Base64URL.encode(randomBytes(33))]]]),
                ("padding", ["prekeys": [["id": 1, "key": good + "="]]]),
                ("standard base64", ["prekeys": [["id": 1, "key": Data(repeating: 0xFB, count: 32).base64EncodedString()]]]),
                ("a low-order point", ["prekeys": [["id": 1, "key": Base64URL.encode([UInt8](repeating: 0, count: 32))]]]),
            ]
            for (what, body) in invalid {
                let answer = try await upload(body)
                #expect(answer.status == 400 && answer.problem == .invalidPrekey, "\(what): \(answer.summary)")
            }
            let malformed: [(String, Any)] = [
                ("an id over 32 bits", #"{"prekeys":[{"id":4294967296,"key":"\#(good)"}]}"#),
                ("a negative id", #"{"prekeys":[{"id":-1,"key":"\#(good)"}]}"#),
                ("an id as text", #"{"prekeys":[{"id":"1","key":"\#(good)"}]}"#),
                ("no key", #"{"prekeys":[{"id":1}]}"#),
                ("not an object", #"[1]"#),
                ("not JSON", #"{"prekeys":"#),
            ]
            for (what, body) in malformed {
                let answer = try await upload(body)
                #expect(answer.status == 400 && answer.problem == .invalidJSON, "\(what): \(answer.summary)")
            }
            #expect(try await Self.count(relay, bob) == 0, "nothing refused was stored")

            // The largest id is an id; a conflict or the limit refuses the whole upload.
            let stored = [Prekey(id: 4_294_967_295, key: MailboxKeyPair().publicKey)] + Self.prekeys(2)
            #expect(try await Self.upload(relay, stored, as: bob).status == 200)
            let conflict = try await Self.upload(relay, Self.prekeys(1, from: 3) + Self.prekeys(1, from: 2), as: bob)
            #expect(conflict.status == 409 && conflict.problem == .prekeyConflict, "\(conflict.summary)")
            let tooMany = try await Self.upload(relay, Self.prekeys(2, from: 3), as: bob)
            #expect(tooMany.status == 409 && tooMany.problem == .tooManyPrekeys, "\(tooMany.summary)")
            #expect(try await Self.count(relay, bob) == 3, "neither refused upload stored anything")
            #expect(try await Self.upload(relay, stored + Self.prekeys(1, from: 3), as: bob).json["count"] as? Int == 4,
                    "up to the limit, retries included")

            let claimBody = try await Self.claim(relay, bob, body: "[]")
            #expect(claimBody.status == 400 && claimBody.problem == .invalidJSON, "a claim's body is an object or nothing")
        }
    }

    /// Over either bucket the claim is refused alike, with the same Retry-After: the claimer
    /// cannot tell its own limit from the owner's.
    @Test func claimsAreLimitedPerClaimerAndPerOwner() async throws {
        try await withTestRelay(configure: {
            $0.prekeyClaimBurst = 3
            $0.prekeyClaimRate = 0.01
            $0.prekeyMailboxBurst = 4
            $0.prekeyMailboxRate = 0.02
        }) { relay in
            let bob = try await relay.signIn("bob").session, carol = try await relay.signIn("carol").session
            let alice = try await relay.signIn("alice").session, dave = try await relay.signIn("dave").session
            #expect(try await Self.upload(relay, Self.prekeys(10), as: bob).status == 200)
            #expect(try await Self.upload(relay, Self.prekeys(10), as: carol, to: "carol").status == 200)
            // Alice's own bucket: 3 claims, over two owners.
            for owner in ["bob", "carol", "carol"] { #expect(try await Self.claim(relay, alice, of: owner).status == 200) }
            let own = try await Self.claim(relay, alice, of: "bob")
            #expect(own.status == 429 && own.problem == .prekeyClaimsLimited, "\(own.summary)")
            // Bob's bucket: 4 claims by everyone together (alice's refused one took none of it).
            for session in [dave, dave, carol] { #expect(try await Self.claim(relay, session).status == 200) }
            let owners = try await Self.claim(relay, carol)
            #expect(owners.status == 429 && owners.problem == .prekeyClaimsLimited, "\(owners.summary)")
            #expect(own.headers["retry-after"] == "100" && owners.headers["retry-after"] == "100", "the longest wait of one token")
            #expect(own.json["detail"] as? String == owners.json["detail"] as? String)
            #expect(try await Self.count(relay, bob) == 6, "refused claims took nothing")
            #expect(try await Self.claim(relay, dave, of: "carol").status == 200, "another owner's bucket is another")
        }
    }

    /// A claimer the owner blocked is refused as its sends are, and its refused claims leave the
    /// owner's bucket to the others.
    @Test func aBlockedClaimerIsRefusedAsItsSendsAre() async throws {
        try await withTestRelay(configure: { $0.prekeyMailboxBurst = 2; $0.prekeyMailboxRate = 0.01 }) { relay in
            let bob = try await relay.signIn("bob").session
            let mallory = try await relay.signIn("mallory").session, alice = try await relay.signIn("alice").session
            #expect(try await Self.upload(relay, Self.prekeys(5), as: bob).status == 200)
            #expect(try await relay.call("PUT", "/v1/users/bob/blocked/mallory", session: bob).status == 204)
            let send = try await relay.send(mallory, to: "bob", id: messageID(1))
            for _ in 0..<3 {
                let claim = try await Self.claim(relay, mallory)
                #expect(claim.status == send.status && claim.problem == send.problem && claim.problem == .blocked, "\(claim.summary)")
            }
            // Two claimers: each may take half of the owner's burst of 2 (oneClaimerCannotStarveAFreshOne).
            let carol = try await relay.signIn("carol").session
            #expect(try await Self.claim(relay, alice).status == 200)
            #expect(try await Self.claim(relay, carol).status == 200)
            #expect(try await Self.count(relay, bob) == 3)
        }
    }

    @Test func prekeysGoWithTheIdentityTheyBelongTo() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let identity = IdentityKeyPair()
            func publish(_ identity: IdentityKeyPair) async throws -> Int {
                let bundle = KeyBundle(uid: "bob", identity: identity, mailboxKey: MailboxKeyPair().publicKey).encoded()
                return try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(bundle)).status
            }
            #expect(try await publish(identity) == 204)
            #expect(try await Self.upload(relay, Self.prekeys(3), as: bob).status == 200)
            #expect(try await publish(identity) == 204, "a new mailbox key, the same identity")
            #expect(try await Self.count(relay, bob) == 3)
            #expect(try await publish(IdentityKeyPair()) == 204, "another identity")
            #expect(try await Self.count(relay, bob) == 0)
            #expect(try await Self.upload(relay, Self.prekeys(2), as: bob).status == 200)
            #expect(try await relay.call("DELETE", "/v1/users/bob/keys", session: bob).status == 204)
            #expect(try await Self.count(relay, bob) == 0)
        }
    }

    @Test func theReadyFrameCountsTheOwnersPrekeys() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            #expect(try await Self.upload(relay, Self.prekeys(5), as: bob).status == 200)
            #expect(try await Self.claim(relay, alice).status == 200)
            try await relay.send(alice, to: "bob", id: messageID(1))
            let socket = TestSocket.open(relay, "bob", session: bob)
            let ready = try #require(try await socket.next())
            #expect(ready == .ready(pending: 1, prekeys: 4))
            await socket.close()
        }
    }

    /// A claimed or withdrawn prekey is erased, not marked: its text is gone from the database
    /// files (main file and WAL) once the checkpoint after the erasure ran.
    @Test func claimedAndWithdrawnPrekeysAreGoneFromTheDatabaseFiles() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            let prekeys = Self.prekeys(3)
            func stored(_ prekey: Prekey) -> Bool {
                ["relay.sqlite", "relay.sqlite-wal"].contains { name in
                    FileManager.default.contents(atPath: (relay.dataDirectory as NSString).appendingPathComponent(name))?
                        .range(of: Data(prekey.key.utf8)) != nil
                }
            }
            #expect(try await Self.upload(relay, prekeys, as: bob).status == 200)
            #expect(prekeys.allSatisfy(stored), "the search finds stored prekeys (so that it can fail)")
            #expect(try await Self.claim(relay, alice).decoded(PrekeyClaim.self).prekey == prekeys[0])
            try await eventually("the claimed prekey is overwritten and the WAL truncated") { !stored(prekeys[0]) }
            #expect(stored(prekeys[1]) && stored(prekeys[2]))
            #expect(try await relay.call("DELETE", "/v1/users/bob/prekeys", session: bob).status == 204)
            try await eventually("withdrawn prekeys too") { !stored(prekeys[1]) && !stored(prekeys[2]) }
        }
    }

    /// A claim that takes the owner's supply below the low-water mark sends its subscription one
    /// `prekeys` frame with the count left; claims above the mark send none, and so do further
    /// claims below it, until an upload lifts the supply to the mark and a claim crosses it again.
    @Test func aClaimThatCrossesTheLowWaterMarkTellsTheSubscribedOwnerOnce() async throws {
        try await withTestRelay(configure: { $0.prekeyMailboxBurst = 1000; $0.prekeyClaimBurst = 1000 }) { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            let mark = PrekeyCount.lowWater
            #expect(try await Self.upload(relay, Self.prekeys(mark + 2), as: bob).status == 200)
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            for _ in 0..<2 { #expect(try await Self.claim(relay, alice).status == 200) }
            #expect(try await socket.next(timeout: .milliseconds(300)) == nil, "at or above the mark: nothing")
            #expect(try await Self.claim(relay, alice).status == 200)
            #expect(try await socket.next() == .prekeys(mark - 1), "the claim that crossed the mark")
            for _ in 0..<3 { #expect(try await Self.claim(relay, alice).status == 200) }
            #expect(try await socket.next(timeout: .milliseconds(300)) == nil, "once per crossing, not per claim")
            // A top-up above the mark, and the next crossing is told again.
            #expect(try await Self.upload(relay, Self.prekeys(4, from: 1000), as: bob).json["count"] as? Int == mark)
            for _ in 0..<3 { #expect(try await Self.claim(relay, alice).status == 200) }
            #expect(try await socket.next() == .prekeys(mark - 1))
            await socket.close()
        }
    }

    /// One claimer that empties its share of an owner's bucket leaves the rest to others: a
    /// claimer that never claimed the owner's prekeys is served.
    @Test func oneClaimerCannotStarveAFreshOne() async throws {
        try await withTestRelay(configure: {
            $0.prekeyMailboxBurst = 10
            $0.prekeyMailboxRate = 0.01
        }) { relay in
            let bob = try await relay.signIn("bob").session
            let mallory = try await relay.signIn("mallory").session, alice = try await relay.signIn("alice").session
            #expect(try await Self.upload(relay, Self.prekeys(30), as: bob).status == 200)
            var taken = 0
            for _ in 0..<20 {
                if try await Self.claim(relay, mallory).status == 200 { taken += 1 }
            }
            #expect(taken == 5, "mallory's share: half the owner's burst")
            let fresh = try await Self.claim(relay, alice)
            #expect(fresh.status == 200, "\(fresh.summary)")
            #expect(try fresh.decoded(PrekeyClaim.self).prekey != nil)
        }
    }

    @Test func claimsAreCounted() async throws {
        try await withTestRelay(configure: { $0.prekeyClaimBurst = 3; $0.prekeyClaimRate = 0.01 }) { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            #expect(try await Self.upload(relay, Self.prekeys(2), as: bob).status == 200)
            for _ in 0..<4 { _ = try await Self.claim(relay, alice) }
            let text = try await relay.call("GET", "/metrics").text
            for (result, count) in [("claimed", 2), ("empty", 1), ("limited", 1)] {
                #expect(text.contains(#"mailslot_prekey_claims_total{result="\#(result)"} \#(count)"#), "\(result)")
            }
        }
    }
}
