import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// The blob resource over HTTP (spec/protocol.md §4.15–§4.21): the whole life of a blob on the
/// file storage, every refusal of a part, ranged downloads, acknowledgement and erasure.
@Suite struct BlobTests {
    static func smallParts(_ configuration: inout RelayConfiguration) {
        configuration.blobPartBytes = 1 << 20
    }

    @Test func theWholeLifeOfABlob() async throws {
        try await withTestRelay(configure: Self.smallParts) { relay in try await Self.life(relay) }
    }

    /// The same life with the metadata in PostgreSQL (the bytes still in files).
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func theWholeLifeOfABlobOnPostgreSQL() async throws {
        try await TestDatabase.with { url in
            try await withTestRelay(configure: { configuration in
                Self.smallParts(&configuration)
                configuration.databaseURL = url
            }) { relay in try await Self.life(relay) }
        }
    }

    static func life(_ relay: TestRelay) async throws {
        do {
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let carol = try await relay.signIn("carol").session
            let blob = TestBlob(plainSize: 2_500_000)
            #expect(blob.parts == 3)

            // Create; the identical create again is 200 with the same record; anything else under the id is 409.
            let created = try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob", "carol"]))
            #expect(created.status == 201, "\(created.text)")
            let record = try created.decoded(BlobRecord.self)
            #expect(record.state == .uploading && record.parts == 3 && record.partSize == 1 << 20 && record.received == [])
            #expect(record.recipients == ["bob", "carol"] && record.author == "alice" && record.uploadExpiresAt != nil)
            let again = try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["carol", "bob"]))
            #expect(again.status == 200)
            #expect(try again.decoded(BlobRecord.self) == record)
            var other = blob.create(["bob"])
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: other).problem == .conflict)
            other = blob.create(["bob", "carol"])
            #expect(try await relay.call("POST", "/v1/blobs", session: carol, body: other).problem == .conflict, "another author")

            // Parts in any order; the same part twice with its digest is 200, with another 409.
            #expect(try await relay.putPart(blob, 3, session: alice).status == 200)
            let first = try await relay.putPart(blob, 1, session: alice)
            #expect(first.status == 200)
            #expect(try first.decoded(BlobRecord.self).received == [1, 3])
            #expect(try await relay.putPart(blob, 1, session: alice).status == 200)
            var forged = blob.part(1)
            forged[7] ^= 1
            #expect(try await relay.putPart(blob, 1, session: alice, bytes: forged).problem == .partConflict)

            // A body that does not hash to its digest: 400, nothing recorded, the other parts intact.
            var damaged = blob.part(2)
            damaged[100] ^= 0xFF
            let mismatch = try await relay.putPart(blob, 2, session: alice, bytes: damaged, digest: blob.digest(2))
            #expect(mismatch.problem == .partDigestMismatch)
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)", session: alice).decoded(BlobRecord.self).received == [1, 3])

            // Refusals before the body.
            #expect(try await relay.putPart(blob, 4, session: alice, bytes: [1]).problem == .invalidPart, "a part beyond the size")
            #expect(try await relay.putPart(blob, 0, session: alice, bytes: [1]).problem == .invalidPart)
            #expect(try await relay.call("PUT", "/v1/blobs/\(blob.id)/parts/x", session: alice, body: Data([1])).problem == .invalidPart)
            #expect(try await relay.putPart(blob, 2, session: alice, bytes: Array(blob.part(2).dropLast())).problem == .invalidPartLength)
            #expect(try await relay.putPart(blob, 2, session: alice, headers: ["Content-Type": "application/json"]).problem == .unsupportedMediaType)
            #expect(try await relay.putPart(blob, 2, session: alice, digest: "short").problem == .invalidDigest)
            #expect(try await relay.call("PUT", "/v1/blobs/\(blob.id)/parts/2", session: alice, body: Data(blob.part(2)),
                                         headers: ["Content-Type": "application/octet-stream"]).problem == .invalidDigest)
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob).problem == .blobIncomplete)
            #expect(try await relay.call("POST", "/v1/blobs/\(blob.id)/ack", session: bob).problem == .blobIncomplete)

            // The last part completes the blob.
            let last = try await relay.putPart(blob, 2, session: alice)
            #expect(last.status == 200)
            let complete = try last.decoded(BlobRecord.self)
            #expect(complete.state == .complete && complete.received == nil && complete.expiresAt != nil && complete.uploadExpiresAt == nil)
            #expect(try await relay.putPart(blob, 2, session: alice).status == 200, "the same part again, once complete")
            #expect(try await relay.putPart(blob, 2, session: alice, bytes: damaged).problem == .blobComplete)

            // A recipient sees neither the other recipients nor the parts.
            let seen = try await relay.call("GET", "/v1/blobs/\(blob.id)", session: bob)
            #expect(seen.status == 200 && seen.json["recipients"] == nil && seen.json["received"] == nil)

            // Downloads: whole, and ranges across a part boundary, byte for byte.
            let whole = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob)
            #expect(whole.status == 200 && [UInt8](whole.body) == blob.bytes)
            #expect(whole.headers["content-type"] == "application/octet-stream" && whole.headers["accept-ranges"] == "bytes")
            #expect(whole.headers["cache-control"] == "no-store" && whole.headers["content-length"] == String(blob.size))
            let boundary = blob.partSize
            let ranged = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: carol,
                                              headers: ["Range": "bytes=\(boundary - 10)-\(boundary + 9)"])
            #expect(ranged.status == 206 && [UInt8](ranged.body) == Array(blob.bytes[(boundary - 10)..<(boundary + 10)]))
            #expect(ranged.headers["content-range"] == "bytes \(boundary - 10)-\(boundary + 9)/\(blob.size)")
            let tail = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: alice, headers: ["Range": "bytes=-100"])
            #expect(tail.status == 206 && [UInt8](tail.body) == Array(blob.bytes.suffix(100)))
            let open = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob, headers: ["Range": "bytes=\(boundary)-"])
            #expect(open.status == 206 && [UInt8](open.body) == Array(blob.bytes[boundary...]))
            for range in ["bytes=\(blob.size)-", "bytes=0-1,5-6", "items=0-1", "bytes=5-1", "bytes=-0"] {
                let refused = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob, headers: ["Range": range])
                #expect(refused.status == 416 && refused.problem == .invalidRange, "\(range)")
                #expect(refused.headers["content-range"] == "bytes */\(blob.size)", "\(range)")
            }

            // Each recipient acknowledges; the last one erases the blob: its file and its rows.
            #expect(relay.blobFiles.count == 1)
            #expect(try await relay.call("POST", "/v1/blobs/\(blob.id)/ack", session: alice).status == 404, "the author is no recipient")
            #expect(try await relay.call("POST", "/v1/blobs/\(blob.id)/ack", session: bob).status == 204)
            #expect(try await relay.call("POST", "/v1/blobs/\(blob.id)/ack", session: bob).status == 404, "a second ack finds no party")
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob).status == 404, "bob's access ended")
            let left = try await relay.call("GET", "/v1/blobs/\(blob.id)", session: alice).decoded(BlobRecord.self)
            #expect(left.recipients == ["carol"])
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: carol).status == 200)
            #expect(try await relay.call("POST", "/v1/blobs/\(blob.id)/ack", session: carol).status == 204)
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)", session: alice).status == 404)
            try await eventually("the file is erased") { relay.blobFiles.isEmpty }
            let records = relay.relay.blobs.records
            #expect(try await records.blob(id: blob.id, now: EpochMilliseconds.now()) == .none)
            try await eventually("the erasure is done") { try await records.blobErasures(limit: 10).isEmpty }
            let usage = try await records.blobUsage(author: "alice")
            #expect(usage.bytes == 0 && usage.uploading == 0)
        }
    }

    @Test func createRefusesWhatItCannotKeep() async throws {
        try await withTestRelay(configure: { configuration in
            configuration.maxFileBytes = 1 << 20
            configuration.maxAuthorBlobBytes = 3 << 20
            configuration.maxUploadsPerAuthor = 3
            configuration.maxBlobRecipients = 3
        }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            func create(_ body: [String: Any], _ session: String) async throws -> TestRelay.Answer {
                try await relay.call("POST", "/v1/blobs", session: session, body: body)
            }
            let blob = TestBlob(plainSize: 1000)
            #expect(try await relay.call("POST", "/v1/blobs", body: blob.create(["bob"])).status == 401)
            var body = blob.create(["bob"])
            body["id"] = "short"
            #expect(try await create(body, alice).problem == .invalidBlobID)
            body = blob.create(["bob"])
            body["size"] = 1000
            #expect(try await create(body, alice).problem == .invalidBlobSize)
            for recipients in [[], ["bob", "bob"], ["not a uid"], ["a", "b", "c", "d"]] {
                #expect(try await create(blob.create(recipients), alice).problem == .invalidRecipients, "\(recipients)")
            }
            #expect(try await create(blob.create(["bob"], ttl: 0), alice).problem == .invalidTTL)
            #expect(try await create(blob.create(["bob"], ttl: Defaults.maxMessageTTL + 1), alice).problem == .invalidTTL)
            let big = TestBlob(plainSize: (1 << 20) + 1)
            #expect(try await create(big.create(["bob"]), alice).problem == .blobTooLarge)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: "{\"id\":1}").problem == .invalidJSON)

            // Uploads in progress per author.
            for _ in 0..<3 { #expect(try await create(TestBlob(plainSize: 1000).create(["bob"]), alice).status == 201) }
            let fourth = try await create(TestBlob(plainSize: 1000).create(["bob"]), alice)
            #expect(fourth.problem == .tooManyUploads && fourth.status == 429)
            // Bytes per author, finished and unfinished.
            let large = (0..<3).map { _ in TestBlob(plainSize: 1 << 20) }
            #expect(try await create(large[0].create(["alice"]), bob).status == 201)
            #expect(try await create(large[1].create(["alice"]), bob).status == 201)
            let quota = try await create(large[2].create(["alice"]), bob)
            #expect(quota.problem == .blobQuota && quota.headers["retry-after"] != nil)
            #expect(try await relay.call("DELETE", "/v1/blobs/\(large[0].id)", session: bob).status == 204)
            #expect(try await create(large[2].create(["alice"]), bob).status == 201, "room again after a delete")
        }
    }

    @Test func theAuthorDeletesForEveryoneRecipientsMayNot() async throws {
        try await withTestRelay(configure: Self.smallParts) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let blob = TestBlob(plainSize: 1_500_000)
            try await relay.uploadBlob(blob, session: alice, to: ["bob"])
            #expect(try await relay.call("DELETE", "/v1/blobs/\(blob.id)", session: bob).problem == .forbidden)
            #expect(try await relay.putPart(blob, 1, session: bob).problem == .forbidden)
            #expect(relay.blobFiles.count == 1)
            #expect(try await relay.call("DELETE", "/v1/blobs/\(blob.id)", session: alice).status == 204)
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob).status == 404)
            #expect(try await relay.call("DELETE", "/v1/blobs/\(blob.id)", session: alice).status == 404)
            try await eventually("the file is erased") { relay.blobFiles.isEmpty }
            // An unfinished upload deleted by its author goes too.
            let unfinished = TestBlob(plainSize: 1_500_000)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: unfinished.create(["bob"])).status == 201)
            #expect(try await relay.putPart(unfinished, 1, session: alice).status == 200)
            #expect(try await relay.call("DELETE", "/v1/blobs/\(unfinished.id)", session: alice).status == 204)
            try await eventually { relay.blobFiles.isEmpty }
        }
    }

    @Test func blobsExpireUnfinishedUploadsToo() async throws {
        let clock = TestClock()
        try await withTestRelay(configure: { configuration in
            Self.smallParts(&configuration)
            configuration.clock = clock.relayClock
            configuration.sweepInterval = 3600  // passes run when the test says
            // The clock moves past a day below: the sessions signed in at the start outlive it.
            configuration.sessionLifetime = 3 * 86_400
            configuration.refreshLifetime = 3 * 86_400
        }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let complete = TestBlob(plainSize: 100_000)
            try await relay.uploadBlob(complete, session: alice, to: ["bob"], ttl: 600)
            let unfinished = TestBlob(plainSize: 1_500_000)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: unfinished.create(["bob"], ttl: 7200)).status == 201)
            #expect(try await relay.putPart(unfinished, 1, session: alice).status == 200)
            #expect(relay.blobFiles.count == 2)

            clock.advance(by: .seconds(601))
            #expect(try await relay.call("GET", "/v1/blobs/\(complete.id)", session: bob).status == 404, "expired is gone at once")
            #expect(try await relay.call("GET", "/v1/blobs/\(complete.id)/content", session: alice).status == 404)
            #expect(try await relay.call("GET", "/v1/blobs/\(unfinished.id)", session: alice).status == 200, "the upload has 24 h")
            await relay.relay.blobEraser.pass(logger: TestRelay.logger)
            #expect(relay.blobFiles.count == 1, "the expired blob's file is erased")

            clock.advance(by: .seconds(Defaults.blobUploadTTL))
            let expired = try await relay.call("GET", "/v1/blobs/\(unfinished.id)", session: alice)
            #expect(expired.status == 410 && expired.problem == .uploadExpired, "its author learns why")
            #expect(try await relay.putPart(unfinished, 2, session: alice).problem == .uploadExpired)
            #expect(try await relay.call("GET", "/v1/blobs/\(unfinished.id)", session: bob).status == 404)
            await relay.relay.blobEraser.pass(logger: TestRelay.logger)
            #expect(relay.blobFiles.isEmpty)
            #expect(try await relay.call("GET", "/v1/blobs/\(unfinished.id)", session: alice).status == 404, "swept: gone")
            #expect(try await relay.relay.blobs.records.blobErasures(limit: 10).isEmpty)
        }
    }

    @Test func listsAreTheOwnersOnly() async throws {
        try await withTestRelay(configure: Self.smallParts) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let blobs = (0..<3).map { _ in TestBlob(plainSize: 1000) }
            for blob in blobs { #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob"])).status == 201) }
            let ids = blobs.map(\.id).sorted()
            let page = try await relay.call("GET", "/v1/users/alice/blobs?limit=2", session: alice).decoded(BlobPage.self)
            #expect(page.blobs.map(\.id) == Array(ids.prefix(2)) && page.next == ids[1])
            let rest = try await relay.call("GET", "/v1/users/alice/blobs?limit=2&after=\(ids[1])", session: alice).decoded(BlobPage.self)
            #expect(rest.blobs.map(\.id) == [ids[2]] && rest.next == nil)
            let received = try await relay.call("GET", "/v1/users/bob/blobs?role=recipient", session: bob).decoded(BlobPage.self)
            #expect(received.blobs.map(\.id) == ids && received.blobs.allSatisfy { $0.recipients == nil })
            #expect(try await relay.call("GET", "/v1/users/bob/blobs", session: bob).decoded(BlobPage.self).blobs.isEmpty)
            #expect(try await relay.call("GET", "/v1/users/alice/blobs", session: bob).problem == .forbidden)
            #expect(try await relay.call("GET", "/v1/users/bob/blobs?role=owner", session: bob).problem == .badRequest)
            #expect(try await relay.call("GET", "/v1/users/bob/blobs?limit=501", session: bob).problem == .badRequest)
            #expect(try await relay.call("GET", "/v1/users/bob/blobs?after=x", session: bob).problem == .invalidCursor)
        }
    }

    /// A blob is no business of anyone but its parties: each of them gets the same answer as for
    /// an id that does not exist, byte for byte (status, headers but Date, body).
    @Test func nonPartiesGetTheAnswerOfAMissingBlob() async throws {
        try await withTestRelay(configure: Self.smallParts) { relay in
            let alice = try await relay.signIn("alice").session
            let carol = try await relay.signIn("carol").session
            let blob = TestBlob(plainSize: 1000)
            try await relay.uploadBlob(blob, session: alice, to: ["bob"])
            let missing = BlobLayout.newID()
            for (method, suffix, body) in [("GET", "", nil), ("GET", "/content", nil), ("POST", "/ack", nil), ("DELETE", "", nil),
                                           ("PUT", "/parts/1", Data(blob.bytes))] as [(String, String, Data?)] {
                let headers = ["Content-Type": "application/octet-stream", "Mailslot-Digest": TestBlob.digest(blob.bytes)]
                let foreign = try await relay.call(method, "/v1/blobs/\(blob.id)\(suffix)", session: carol, body: body, headers: headers)
                let absent = try await relay.call(method, "/v1/blobs/\(missing)\(suffix)", session: carol, body: body, headers: headers)
                #expect(foreign.status == 404 && foreign.body == absent.body, "\(method) \(suffix)")
                var (a, b) = (foreign.headers, absent.headers)
                a["date"] = nil
                b["date"] = nil
                #expect(a == b, "\(method) \(suffix)")
            }
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)", session: alice).status == 200, "nothing changed")
        }
    }
}
