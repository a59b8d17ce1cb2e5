import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// Every cell of resource × operation × role, over real HTTP: the owner (bob), the author of a
/// message (alice), another signed-in user (carol), no session, and a signed-out session.
@Suite struct AccessRuleTests {
    @Test func theTableDeniesByDefault() {
        // A pair missing from the table allows no one, whoever asks.
        #expect(!AccessRules.standard.allows(.update, .mailbox, principal: "bob", owner: "bob"))
        #expect(!AccessRules.standard.allows(.update, .blockEntry, principal: "bob", owner: "bob"))
        #expect(AccessRules.standard.allows(.delete, .message, principal: "alice", owner: "bob", author: "alice"))
        #expect(!AccessRules.standard.allows(.delete, .message, principal: "carol", owner: "bob", author: "alice"))
        #expect(!AccessRules.standard.allows(.delete, .message, principal: "carol", owner: "bob", author: nil))
        #expect(!AccessRules.standard.allows(.claim, .message, principal: "bob", owner: "bob"), "claim is for prekeys only")
        #expect(!AccessRules.standard.allows(.update, .prekeys, principal: "bob", owner: "bob"))
        #expect(AccessRules.standard.allows(.claim, .prekeys, principal: "carol", owner: "bob"))
        // Push registrations: the owner's alone, and no update (a PUT that replaces one is a create).
        for operation in [AccessOperation.create, .read, .delete] {
            #expect(AccessRules.standard.allows(operation, .pushRegistration, principal: "bob", owner: "bob"))
            #expect(!AccessRules.standard.allows(operation, .pushRegistration, principal: "carol", owner: "bob"))
        }
        #expect(!AccessRules.standard.allows(.update, .pushRegistration, principal: "bob", owner: "bob"))
        // The push service: read by anyone signed in, nothing else; no owner to be.
        #expect(AccessRules.standard.allows(.read, .pushService, principal: "carol"))
        #expect(!AccessRules.standard.allows(.create, .pushService, principal: "carol"))
        #expect(!AccessRules.standard.allows(.read, .pushRegistration, principal: "bob"), "an owned resource needs its owner")
    }

    /// The table of spec/protocol.md §2 is `AccessRules.standard`, cell for cell: a row or a role
    /// added, removed or changed on either side fails here.
    @Test func theSpecTableIsTheStandardTable() throws {
        let table = try MarkdownTable(in: "spec/protocol.md", header: ["resource", "create", "read", "update", "delete", "claim", "acknowledge"])
        let roles: [String: AccessRole] = ["owner": .owner, "author": .author, "signed-in": .signedIn, "recipient": .recipient]
        var documented: [AccessResource: [AccessOperation: Set<AccessRole>]] = [:]
        for row in table.rows {
            // `userDocument` — `/users/{uid}`: the case name comes first, in backticks.
            let parts = row[0].split(separator: "`", omittingEmptySubsequences: false)
            let name = parts.count > 1 ? String(parts[1]) : row[0]
            let resource = try #require(AccessResource(rawValue: name), "an unknown resource in spec/protocol.md: \(row[0])")
            #expect(documented[resource] == nil, "\(name) has two rows")
            var operations: [AccessOperation: Set<AccessRole>] = [:]
            for (operation, cell) in zip(AccessOperation.allCases, row.dropFirst()) where cell != "—" {
                var allowed: Set<AccessRole> = []
                for name in cell.split(separator: ",") {
                    let role = name.trimmingCharacters(in: .whitespaces)
                    allowed.insert(try #require(roles[role], "an unknown role in spec/protocol.md: \(role)"))
                }
                operations[operation] = allowed
            }
            documented[resource] = operations
        }
        #expect(AccessOperation.allCases.map(\.rawValue) == Array(table.header.dropFirst()), "the columns are the operations, in order")
        #expect(table.rows.count == AccessResource.allCases.count, "one row per resource")
        // Cell by cell, so that a failure names the cell (an absent cell allows no one, as an empty one).
        for resource in AccessResource.allCases {
            for operation in AccessOperation.allCases {
                let written = documented[resource]?[operation] ?? [], enforced = AccessRules.standard.table[resource]?[operation] ?? []
                #expect(written == enforced, "\(operation) \(resource): spec/protocol.md says \(written), AccessRules.standard \(enforced)")
            }
        }
    }

    @Test func everyCellOverHTTP() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            let carol = try await relay.signIn("carol").session
            let gone = try await relay.signIn("dave").session
            #expect(try await relay.call("DELETE", "/v1/sessions/current", session: gone).status == 204)

            let bundle = String(decoding: KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey).encoded(),
                                as: UTF8.self)
            #expect(try await relay.call("PUT", "/v1/users/bob", session: bob, body: ["theme": "dark"]).status == 204)
            #expect(try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: bundle).status == 204)
            let message = messageID(1)
            #expect(try await relay.send(alice, to: "bob", id: message).status == 201)
            let prekeys = ["prekeys": [["id": 1, "key": Base64URL.encode(MailboxKeyPair().publicKey.bytes)]]]

            struct Cell {
                let method: String, path: String, body: Any?
                let owner: Int, author: Int, other: Int
            }
            let cells: [Cell] = [
                Cell(method: "GET", path: "/v1/users/bob", body: nil, owner: 200, author: 403, other: 403),
                Cell(method: "PUT", path: "/v1/users/bob", body: ["a": 1], owner: 204, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/keys", body: nil, owner: 200, author: 200, other: 200),
                Cell(method: "PUT", path: "/v1/users/bob/keys", body: bundle, owner: 204, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/messages/\(message)", body: nil, owner: 200, author: 403, other: 403),
                Cell(method: "PATCH", path: "/v1/users/bob/messages/\(message)", body: ["lease_seconds": 30], owner: 200, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/messages", body: nil, owner: 200, author: 403, other: 403),
                Cell(method: "PUT", path: "/v1/users/bob/blocked/mallory", body: nil, owner: 204, author: 403, other: 403),
                Cell(method: "DELETE", path: "/v1/users/bob/blocked/mallory", body: nil, owner: 204, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/subscribe", body: nil, owner: 400, author: 403, other: 403),
                Cell(method: "POST", path: "/v1/users/bob/prekeys", body: prekeys, owner: 200, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/prekeys", body: nil, owner: 200, author: 403, other: 403),
                Cell(method: "POST", path: "/v1/users/bob/prekeys/claim", body: nil, owner: 200, author: 200, other: 200),
                Cell(method: "DELETE", path: "/v1/users/bob/prekeys", body: nil, owner: 204, author: 403, other: 403),
                // Push registrations: past the rule, the owner meets what comes next (no provider
                // is configured here: 400 push_provider_disabled; no registration: 404).
                Cell(method: "PUT", path: "/v1/users/bob/push/\(messageID(50))", body: ["provider": "webhook"], owner: 400, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/push", body: nil, owner: 200, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/users/bob/push/\(messageID(50))", body: nil, owner: 404, author: 403, other: 403),
                Cell(method: "DELETE", path: "/v1/users/bob/push/\(messageID(50))", body: nil, owner: 404, author: 403, other: 403),
                Cell(method: "GET", path: "/v1/push", body: nil, owner: 200, author: 200, other: 200),
            ]
            for cell in cells {
                let what = "\(cell.method) \(cell.path)"
                let anonymous = try await relay.call(cell.method, cell.path, body: cell.body)
                #expect(anonymous.status == 401, "\(what) without a session")
                #expect(anonymous.problem == .unauthenticated, "\(what)")
                #expect(try await relay.call(cell.method, cell.path, session: gone, body: cell.body).status == 401, "\(what) signed out")
                // Denied roles first, so that a wrongly allowed write would show in the owner's result too.
                #expect(try await relay.call(cell.method, cell.path, session: carol, body: cell.body).status == cell.other, "\(what) as another user")
                #expect(try await relay.call(cell.method, cell.path, session: alice, body: cell.body).status == cell.author, "\(what) as the author")
                #expect(try await relay.call(cell.method, cell.path, session: bob, body: cell.body).status == cell.owner, "\(what) as the owner")
            }

            // create message: any signed-in user, including the owner; no one without a session.
            for (session, n) in [(bob, 10), (alice, 11), (carol, 12)] {
                #expect(try await relay.send(session, to: "bob", id: messageID(n)).status == 201)
            }
            #expect(try await relay.send("mss_" + String(repeating: "A", count: 43), to: "bob", id: messageID(13)).status == 401)
            #expect(try await relay.send(gone, to: "bob", id: messageID(13)).status == 401)

            // delete message: the owner (ack) or the author (unsend); another user gets 403 whether or
            // not the message exists, and so does the author for a message that is gone.
            let byCarol = messageID(12), byAlice = messageID(11), byBob = messageID(10)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byAlice)", session: carol).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(999))", session: carol).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byAlice)", session: alice).status == 204)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byAlice)", session: alice).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byCarol)", session: bob).status == 204)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byCarol)", session: bob).status == 404)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(byBob)", session: nil).status == 401)
            #expect(try await relay.call("GET", "/v1/users/bob/messages/\(byBob)", session: bob).status == 200, "nothing was lost")

            // Blobs: alice the author, bob the recipient, carol no party. Anyone who is no party gets
            // the 404 of a missing blob; a party without the operation 403, except acknowledge, which
            // only a recipient has and everyone else finds nothing to acknowledge (404).
            let blob = TestBlob(plainSize: 1000), doomed = TestBlob(plainSize: 1000)
            #expect(try await relay.call("POST", "/v1/blobs", body: blob.create(["bob"])).status == 401)
            #expect(try await relay.call("POST", "/v1/blobs", session: gone, body: blob.create(["bob"])).status == 401)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob"])).status == 201)
            #expect(try await relay.call("POST", "/v1/blobs", session: carol, body: doomed.create(["bob"])).status == 201, "create: signed-in")
            #expect(try await relay.call("DELETE", "/v1/blobs/\(doomed.id)", session: carol).status == 204)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: doomed.create(["bob"])).status == 201)
            let part = ["Content-Type": "application/octet-stream", "Mailslot-Digest": blob.digest(1)]
            struct BlobCell {
                let method: String, path: String, body: Data?, headers: [String: String]
                /// In the order asked: denied ones first.
                let answers: [(String, Int)]
            }
            let base = "/v1/blobs/\(blob.id)"
            let blobCells: [BlobCell] = [
                BlobCell(method: "GET", path: base, body: nil, headers: [:], answers: [(carol, 404), (bob, 200), (alice, 200)]),
                BlobCell(method: "GET", path: base + "/content", body: nil, headers: [:], answers: [(carol, 404), (bob, 409), (alice, 409)]),
                BlobCell(method: "PUT", path: base + "/parts/1", body: Data(blob.bytes), headers: part,
                         answers: [(carol, 404), (bob, 403), (alice, 200)]),
                BlobCell(method: "GET", path: base + "/content", body: nil, headers: [:], answers: [(carol, 404), (bob, 200), (alice, 200)]),
                BlobCell(method: "GET", path: "/v1/users/bob/blobs?role=recipient", body: nil, headers: [:],
                         answers: [(carol, 403), (alice, 403), (bob, 200)]),
                BlobCell(method: "GET", path: "/v1/users/alice/blobs", body: nil, headers: [:], answers: [(carol, 403), (bob, 403), (alice, 200)]),
                BlobCell(method: "DELETE", path: "/v1/blobs/\(doomed.id)", body: nil, headers: [:], answers: [(carol, 404), (bob, 403), (alice, 204)]),
                BlobCell(method: "POST", path: base + "/ack", body: nil, headers: [:], answers: [(carol, 404), (alice, 404), (bob, 204)]),
            ]
            for cell in blobCells {
                let what = "\(cell.method) \(cell.path)"
                #expect(try await relay.call(cell.method, cell.path, body: cell.body, headers: cell.headers).status == 401, "\(what) without a session")
                #expect(try await relay.call(cell.method, cell.path, session: gone, body: cell.body, headers: cell.headers).status == 401, "\(what) signed out")
                for (session, status) in cell.answers {
                    let who = session == alice ? "the author" : session == bob ? "the recipient" : "another user"
                    #expect(try await relay.call(cell.method, cell.path, session: session, body: cell.body, headers: cell.headers).status == status,
                            "\(what) as \(who)")
                }
            }
        }
    }

    @Test func authorsSeeTheirRecordButNotTheEnvelope() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let sent = try await relay.send(alice, to: "bob", id: messageID(1))
            #expect(sent.json["author"] as? String == "alice")
            #expect(sent.json["envelope"] == nil)
            let read = try await relay.call("GET", "/v1/users/bob/messages/\(messageID(1))", session: bob)
            #expect(read.json["envelope"] is String)
            #expect(read.json["author"] as? String == "alice", "the author is stamped from the session, never from the request")
        }
    }
}
