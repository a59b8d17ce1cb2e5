import Foundation
import MailslotWire

/// Blobs (spec/protocol.md §4.15–§4.21): the rule cells of the `blob` and `blobList` rows
/// (``rules(_:)``, part of the `rules` group), and the `blobs` group: what a create, a part and
/// a download may carry, that a blob is erased once its last recipient acknowledged it, and the
/// bounds on unfinished uploads and on an author's blob bytes. Bounded: the largest blob it
/// uploads is one part and a little more (about 8 MiB on a default relay); every blob it makes is
/// deleted by the clean-up.
enum BlobChecks {
    // MARK: Helpers

    /// A blob the checks made, with the bytes they upload into it.
    struct Blob {
        let id: String
        let bytes: Data
        let partSize: Int
        let parts: Int

        /// Bytes `[(n − 1) · partSize, min(n · partSize, size))`.
        func part(_ number: Int) -> Data {
            let start = (number - 1) * partSize
            return bytes.subdata(in: start..<min(start + partSize, bytes.count))
        }
    }

    /// The ciphertext size of a file of `plainSize` bytes (spec/attachments.md §1.1).
    static func sealedSize(_ plainSize: Int64) -> Int64 { FileCipher.size(plainSize: plainSize) ?? 0 }

    /// The smallest blob: one part on any relay (65 577 bytes, a file of up to 64 KiB).
    static let smallest = sealedSize(1)

    /// The `Mailslot-Digest` of `bytes`: BLAKE2b-256, unpadded base64url.
    static func digest(_ bytes: Data) -> String { Base64URL.encode(blake2b([UInt8](bytes))) }

    static func create(_ context: AuditContext, _ user: AuditUser?, id: String = BlobLayout.newID(), size: Int64,
                       recipients: [String], extra: [String: Any] = [:]) async throws -> AuditHTTP.Answer {
        var body: [String: Any] = ["id": id, "size": size, "recipients": recipients]
        body.merge(extra) { _, new in new }
        return try await context.http.call("POST", "/v1/blobs", session: user?.session, body: body)
    }

    /// ``create(_:_:id:size:recipients:extra:)`` for the limit checks, which make many: a
    /// `429 rate_limited` (the author's create bucket, shared with messages) is waited out, a few
    /// times at most, so that the bound they look for is the one they meet.
    static func createPatiently(_ context: AuditContext, _ user: AuditUser, size: Int64, recipients: [String]) async throws -> AuditHTTP.Answer {
        let id = BlobLayout.newID()
        var answer = try await create(context, user, id: id, size: size, recipients: recipients)
        for _ in 0..<3 where answer.code == "rate_limited" {
            let wait = min(Int(answer.headers["retry-after"] ?? "") ?? 1, 5)
            try await Task.sleep(for: .seconds(wait))
            answer = try await create(context, user, id: id, size: size, recipients: recipients)
        }
        return answer
    }

    /// Creates a blob of `size` random bytes from `author` to `recipients`; nil (and a failed
    /// `name`) when the relay does not answer 201.
    static func make(_ context: AuditContext, _ name: String, author: AuditUser, size: Int64 = smallest,
                     recipients: [String]) async throws -> Blob? {
        let id = BlobLayout.newID()
        let answer = try await create(context, author, id: id, size: size, recipients: recipients)
        guard answer.status == 201, let partSize = answer.json["part_size"] as? Int, let parts = answer.json["parts"] as? Int,
              partSize > 0, parts == (Int(size) - 1) / partSize + 1 else {
            context.record(name, false, "creating a blob to work with answered \(answer.summary) \(answer.text.prefix(200))")
            return nil
        }
        return Blob(id: id, bytes: Data(randomBytes(Int(size))), partSize: partSize, parts: parts)
    }

    static func put(_ context: AuditContext, _ user: AuditUser?, _ blob: Blob, part number: Int, body: Data? = nil,
                    digest: String? = nil, headers: [String: String] = [:]) async throws -> AuditHTTP.Answer {
        let bytes = body ?? (1...blob.parts).contains(number).then { blob.part(number) } ?? Data(randomBytes(16))
        var fields = ["Content-Type": "application/octet-stream", BlobLayout.digestHeader: digest ?? Self.digest(bytes)]
        fields.merge(headers) { _, new in new }
        return try await context.http.call("PUT", "/v1/blobs/\(blob.id)/parts/\(number)", session: user?.session, body: bytes, headers: fields)
    }

    /// Uploads every part of `blob`; whether the last answer says it is complete.
    static func upload(_ context: AuditContext, _ author: AuditUser, _ blob: Blob) async throws -> Bool {
        var last: AuditHTTP.Answer?
        for number in 1...blob.parts {
            last = try await put(context, author, blob, part: number)
            guard last?.status == 200 else { return false }
        }
        return last?.json["state"] as? String == "complete"
    }

    static func get(_ context: AuditContext, _ user: AuditUser?, _ id: String, _ suffix: String = "",
                    method: String = "GET", headers: [String: String] = [:]) async throws -> AuditHTTP.Answer {
        try await context.http.call(method, "/v1/blobs/\(id)\(suffix)", session: user?.session, headers: headers)
    }

    /// Whether two answers are the same to a client: status, body, and every header but `Date`
    /// (which moves with the clock). A non-party's answer must be exactly a missing blob's.
    static func same(_ a: AuditHTTP.Answer, _ b: AuditHTTP.Answer) -> Bool {
        var ha = a.headers, hb = b.headers
        ha["date"] = nil
        hb["date"] = nil
        return a.status == b.status && a.body == b.body && ha == hb
    }

    /// Asks the same of `blob` and of a blob id no one made, as `user`: the check passes when the
    /// two answers are the same and a `404` (a non-party learns nothing, spec/protocol.md §2).
    static func looksMissing(_ context: AuditContext, _ name: String, _ user: AuditUser, _ id: String,
                             _ ask: (String) async throws -> AuditHTTP.Answer) async {
        await context.check(name) {
            let real = try await ask(id), random = try await ask(BlobLayout.newID())
            context.record(name, real.status == 404 && same(real, random),
                           "for a blob it is no party to: \(real.summary) \(real.text.prefix(120)); for a random id: \(random.summary) \(random.text.prefix(120))")
        }
    }

    /// Whether `user` still reads `id` (`200`).
    static func readable(_ context: AuditContext, _ user: AuditUser, _ id: String) async throws -> Bool {
        try await get(context, user, id).status == 200
    }

    // MARK: Rules

    /// Every cell of the `blob` and `blobList` rows: alice writes a blob for bob; mallory is no party.
    static func rules(_ context: AuditContext) async {
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        let id = BlobLayout.newID()
        var created: Blob?
        await context.check("rule.blob.signed-in-user-creates") {
            let answer = try await create(context, alice, id: id, size: smallest, recipients: [bob.uid])
            context.record("rule.blob.signed-in-user-creates",
                           answer.status == 201 && answer.json["author"] as? String == alice.uid && answer.json["state"] as? String == "uploading",
                           "expected 201, uploading, stamped with the creator; got \(answer.summary) \(answer.text.prefix(200))")
            if answer.status == 201, let partSize = answer.json["part_size"] as? Int, let parts = answer.json["parts"] as? Int {
                created = Blob(id: id, bytes: Data(randomBytes(Int(smallest))), partSize: partSize, parts: parts)
            }
        }
        await context.check("rule.blob.anonymous-cannot-create") {
            context.expect("rule.blob.anonymous-cannot-create", try await create(context, nil, size: smallest, recipients: [bob.uid]), 401)
        }
        guard let blob = created else {
            return context.record("rule.blob.setup", false, "no blob to check the rules on")
        }
        await context.check("rule.blob.author-reads") {
            let answer = try await get(context, alice, blob.id)
            context.record("rule.blob.author-reads", answer.status == 200 && answer.json["recipients"] as? [String] == [bob.uid],
                           "expected 200 with the recipients, got \(answer.summary) \(answer.text.prefix(200))")
        }
        await context.check("rule.blob.recipient-reads") {
            let answer = try await get(context, bob, blob.id)
            context.record("rule.blob.recipient-reads", answer.status == 200 && answer.json["recipients"] == nil && answer.json["received"] == nil,
                           "expected 200 without recipients or parts, got \(answer.summary) \(answer.text.prefix(200))")
        }
        await looksMissing(context, "rule.blob.other-cannot-read", mallory, blob.id) { try await get(context, mallory, $0) }
        await context.check("rule.blob.anonymous-cannot-read") {
            context.expect("rule.blob.anonymous-cannot-read", try await get(context, nil, blob.id), 401)
        }
        await context.check("rule.blob.recipient-cannot-upload") {
            context.expect("rule.blob.recipient-cannot-upload", try await put(context, bob, blob, part: 1), 403, "forbidden")
        }
        await looksMissing(context, "rule.blob.other-cannot-upload", mallory, blob.id) { id in
            try await put(context, mallory, Blob(id: id, bytes: blob.bytes, partSize: blob.partSize, parts: blob.parts), part: 1)
        }
        await context.check("rule.blob.author-uploads") {
            let answer = try await put(context, alice, blob, part: 1)
            context.record("rule.blob.author-uploads", answer.status == 200 && answer.json["state"] as? String == "complete",
                           "expected 200 and complete, got \(answer.summary) \(answer.text.prefix(200))")
        }
        await context.check("rule.blob.recipient-downloads") {
            let answer = try await get(context, bob, blob.id, "/content")
            context.record("rule.blob.recipient-downloads", answer.status == 200 && answer.body == blob.bytes,
                           "expected 200 with the bytes uploaded, got \(answer.summary), \(answer.body.count) bytes")
        }
        await looksMissing(context, "rule.blob.other-cannot-download", mallory, blob.id) { try await get(context, mallory, $0, "/content") }
        await looksMissing(context, "rule.blob.other-cannot-acknowledge", mallory, blob.id) {
            try await get(context, mallory, $0, "/ack", method: "POST")
        }
        await context.check("rule.blob.author-cannot-acknowledge-for-the-recipient") {
            let answer = try await get(context, alice, blob.id, "/ack", method: "POST")
            let kept = try await readable(context, bob, blob.id)
            context.record("rule.blob.author-cannot-acknowledge-for-the-recipient", answer.status == 404 && kept,
                           "expected 404 and the blob still the recipient's; got \(answer.summary), \(kept ? "kept" : "gone")")
        }
        await context.check("rule.blob.recipient-cannot-delete") {
            let answer = try await get(context, bob, blob.id, method: "DELETE")
            let kept = try await readable(context, alice, blob.id)
            context.record("rule.blob.recipient-cannot-delete", answer.status == 403 && answer.code == "forbidden" && kept,
                           "expected 403 forbidden and the blob kept; got \(answer.summary), \(kept ? "kept" : "gone")")
        }
        await context.check("rule.blob.other-cannot-delete") {
            let real = try await get(context, mallory, blob.id, method: "DELETE")
            let random = try await get(context, mallory, BlobLayout.newID(), method: "DELETE")
            let kept = try await readable(context, alice, blob.id)
            context.record("rule.blob.other-cannot-delete", real.status == 404 && same(real, random) && kept,
                           "an outsider's DELETE answered \(real.summary) (a random id's \(random.summary)), and the blob was \(kept ? "kept" : "erased")")
        }
        await context.check("rule.blob.owner-lists") {
            let answer = try await context.http.call("GET", "/v1/users/\(bob.uid)/blobs?role=recipient", session: bob.session)
            let ids = (answer.json["blobs"] as? [[String: Any]])?.compactMap { $0["id"] as? String } ?? []
            context.record("rule.blob.owner-lists", answer.status == 200 && ids.contains(blob.id),
                           "expected 200 listing the blob, got \(answer.summary) \(answer.text.prefix(200))")
        }
        for (name, role) in [("rule.blob.other-cannot-list", "recipient"), ("rule.blob.other-cannot-list-authored", "author")] {
            await context.check(name) {
                context.expect(name, try await context.http.call("GET", "/v1/users/\(bob.uid)/blobs?role=\(role)", session: mallory.session),
                               403, "forbidden")
            }
        }
        await context.check("rule.blob.anonymous-cannot-list") {
            context.expect("rule.blob.anonymous-cannot-list", try await context.http.call("GET", "/v1/users/\(bob.uid)/blobs"), 401)
        }
        await context.check("rule.blob.recipient-acknowledges") {
            context.expect("rule.blob.recipient-acknowledges", try await get(context, bob, blob.id, "/ack", method: "POST"), 204)
        }
        await looksMissing(context, "rule.blob.acknowledged-recipient-cannot-read", bob, blob.id) { try await get(context, bob, $0, "/content") }
        await context.check("rule.blob.erased-after-the-last-acknowledgement") {
            context.expect("rule.blob.erased-after-the-last-acknowledgement", try await get(context, alice, blob.id), 404, "not_found")
        }
        await context.check("rule.blob.author-deletes") {
            guard let second = try await make(context, "rule.blob.author-deletes", author: alice, recipients: [bob.uid]) else { return }
            let answer = try await get(context, alice, second.id, method: "DELETE")
            let gone = try await get(context, bob, second.id)
            context.record("rule.blob.author-deletes", answer.status == 204 && gone.status == 404,
                           "expected 204 and the blob gone for its recipient; got \(answer.summary), then \(gone.summary)")
        }
    }

    // MARK: The blobs group

    @Sendable static func run(_ context: AuditContext) async {
        // An author of its own: the limits group's flood may have emptied alice's create bucket.
        guard let author = try? await context.signIn("blob-author") else {
            return context.record("blob.setup", false, "could not sign the blob author in")
        }
        await creates(context, author)
        await parts(context, author)
        await erasure(context, author)
        await limits(context)
    }

    /// What a create may carry: each malformed one refused with its code, nothing created.
    static func creates(_ context: AuditContext, _ alice: AuditUser) async {
        let bob = context.bob!, mallory = context.mallory!
        let refused: [(String, Set<ProblemCode>, (String) -> [String: Any])] = [
            ("blob.create.size-of-no-file-refused", [.invalidBlobSize], { ["id": $0, "size": 1000, "recipients": [bob.uid]] }),
            ("blob.create.size-off-by-one-refused", [.invalidBlobSize], { ["id": $0, "size": smallest + 1, "recipients": [bob.uid]] }),
            // 2^40 bytes: above every file a relay may be configured to take (64 GiB at most).
            ("blob.create.oversize-refused", [.blobTooLarge], { ["id": $0, "size": sealedSize(1 << 40), "recipients": [bob.uid]] }),
            ("blob.create.no-recipients-refused", [.invalidRecipients], { ["id": $0, "size": smallest, "recipients": [String]()] }),
            ("blob.create.repeated-recipient-refused", [.invalidRecipients], { ["id": $0, "size": smallest, "recipients": [bob.uid, bob.uid]] }),
            ("blob.create.invalid-recipient-refused", [.invalidRecipients], { ["id": $0, "size": smallest, "recipients": [bob.uid, ".."]] }),
            // More than any relay allows (10 000 at most); the body is over a small limit's.
            ("blob.create.too-many-recipients-refused", [.invalidRecipients, .bodyTooLarge],
             { ["id": $0, "size": smallest, "recipients": (0...10_000).map { "r\($0)" }] }),
            ("blob.create.ttl-over-the-maximum-refused", [.invalidTTL],
             { ["id": $0, "size": smallest, "recipients": [bob.uid], "ttl_seconds": 400 * 24 * 3600] }),
            ("blob.create.negative-size-refused", [.invalidBlobSize, .invalidJSON], { ["id": $0, "size": -65577, "recipients": [bob.uid]] }),
        ]
        for (name, codes, body) in refused {
            await context.check(name) {
                let id = BlobLayout.newID()
                let answer = try await context.http.call("POST", "/v1/blobs", session: alice.session, body: body(id))
                let after = try await get(context, alice, id)
                let code = answer.code.flatMap(ProblemCode.init(rawValue:))
                context.record(name, code.map { codes.contains($0) && $0.status == answer.status } == true && after.status == 404,
                               "expected \(codes.map(\.rawValue).sorted().joined(separator: " or ")) and nothing created; got \(answer.summary), then \(after.summary)")
            }
        }
        await context.check("blob.create.invalid-id-refused") {
            let answer = try await create(context, alice, id: "short", size: smallest, recipients: [bob.uid])
            context.expect("blob.create.invalid-id-refused", answer, 400, "invalid_blob_id")
        }
        await context.check("blob.create.retry-is-idempotent") {
            let id = BlobLayout.newID()
            let first = try await create(context, alice, id: id, size: smallest, recipients: [bob.uid, mallory.uid])
            let again = try await create(context, alice, id: id, size: smallest, recipients: [mallory.uid, bob.uid])
            let other = try await create(context, alice, id: id, size: smallest, recipients: [bob.uid])
            let taken = try await create(context, mallory, id: id, size: smallest, recipients: [bob.uid, mallory.uid])
            context.record("blob.create.retry-is-idempotent",
                           first.status == 201 && again.status == 200 && again.json["id"] as? String == id
                               && other.status == 409 && other.code == "conflict" && taken.status == 409 && taken.code == "conflict",
                           "create, the same again, other recipients, another author: \(first.summary), \(again.summary), \(other.summary), \(taken.summary) (expected 201, 200, 409, 409)")
        }
        await context.check("blob.recipient-learns-no-other-recipient") {
            guard let blob = try await make(context, "blob.recipient-learns-no-other-recipient", author: alice, recipients: [bob.uid, mallory.uid]),
                  try await upload(context, alice, blob) else {
                return context.record("blob.recipient-learns-no-other-recipient", false, "could not upload the blob")
            }
            let seen = try await get(context, bob, blob.id)
            let listed = try await context.http.call("GET", "/v1/users/\(bob.uid)/blobs?role=recipient", session: bob.session)
            context.record("blob.recipient-learns-no-other-recipient",
                           seen.status == 200 && !seen.text.contains(mallory.uid) && listed.status == 200 && !listed.text.contains(mallory.uid),
                           "a recipient's view names the other recipient: \(seen.text.prefix(200))")
        }
    }

    /// Parts: each malformed one refused with its code, and nothing recorded; a recorded part never changes.
    static func parts(_ context: AuditContext, _ alice: AuditUser) async {
        let bob = context.bob!
        // Two parts: one of the relay's part size and a short one (the sealed size of a file of
        // the part size is a little more than it).
        let probe = try? await create(context, alice, size: smallest, recipients: [bob.uid])
        guard let partSize = probe?.json["part_size"] as? Int, let probeID = probe?.json["id"] as? String else {
            return context.record("blob.part.setup", false, "a create answered \(probe?.summary ?? "nothing")")
        }
        _ = try? await get(context, alice, probeID, method: "DELETE")
        guard let blob = try? await make(context, "blob.part.setup", author: alice, size: sealedSize(Int64(partSize)), recipients: [bob.uid]) else { return }
        func received() async throws -> [Int]? { try await get(context, alice, blob.id).json["received"] as? [Int] }

        await context.check("blob.part.digest-mismatch-refused") {
            var wrong = blob.part(1)
            wrong[wrong.startIndex] ^= 1
            let answer = try await put(context, alice, blob, part: 1, body: wrong, digest: digest(blob.part(1)))
            let stored = try await received()
            context.record("blob.part.digest-mismatch-refused", answer.status == 400 && answer.code == "part_digest_mismatch" && stored == [],
                           "expected 400 part_digest_mismatch and nothing recorded; got \(answer.summary), received \(stored.map { "\($0)" } ?? "?")")
        }
        let malformed: [(String, Int, String, () async throws -> AuditHTTP.Answer)] = [
            ("blob.part.beyond-the-declared-size-refused", 400, "invalid_part", { try await put(context, alice, blob, part: blob.parts + 1) }),
            ("blob.part.zero-refused", 400, "invalid_part", { try await put(context, alice, blob, part: 0, body: blob.part(1)) }),
            ("blob.part.short-refused", 400, "invalid_part_length", { try await put(context, alice, blob, part: 1, body: blob.part(1).prefix(1000)) }),
            ("blob.part.long-refused", 400, "invalid_part_length", { try await put(context, alice, blob, part: 2, body: blob.part(2) + Data([0])) }),
            ("blob.part.missing-digest-refused", 400, "invalid_digest", {
                try await context.http.call("PUT", "/v1/blobs/\(blob.id)/parts/1", session: alice.session, body: blob.part(1),
                                            headers: ["Content-Type": "application/octet-stream"])
            }),
            ("blob.part.padded-digest-refused", 400, "invalid_digest", { try await put(context, alice, blob, part: 1, digest: digest(blob.part(1)) + "=") }),
            ("blob.part.short-digest-refused", 400, "invalid_digest", { try await put(context, alice, blob, part: 1, digest: String(digest(blob.part(1)).dropLast(2))) }),
            ("blob.part.json-content-type-refused", 415, "unsupported_media_type", {
                try await put(context, alice, blob, part: 1, headers: ["Content-Type": "application/json"])
            }),
        ]
        for (name, status, code, ask) in malformed {
            await context.check(name) {
                let answer = try await ask()
                let stored = try await received()
                context.record(name, answer.status == status && answer.code == code && stored == [],
                               "expected \(status) \(code) and nothing recorded; got \(answer.summary), received \(stored.map { "\($0)" } ?? "?")")
            }
        }
        await chunked(context, blob, alice)
        await context.check("blob.part.stored-part-never-changes") {
            let first = try await put(context, alice, blob, part: 1)
            let again = try await put(context, alice, blob, part: 1)
            let other = try await put(context, alice, blob, part: 1, body: Data(randomBytes(blob.part(1).count)))
            let stored = try await received()
            context.record("blob.part.stored-part-never-changes",
                           first.status == 200 && again.status == 200 && other.status == 409 && other.code == "part_conflict" && stored == [1],
                           "the part, the same again, other bytes: \(first.summary), \(again.summary), \(other.summary) (expected 200, 200, 409 part_conflict); received \(stored.map { "\($0)" } ?? "?")")
        }
        await context.check("blob.download.incomplete-refused") {
            context.expect("blob.download.incomplete-refused", try await get(context, bob, blob.id, "/content"), 409, "blob_incomplete")
        }
        await context.check("blob.ack.incomplete-refused") {
            context.expect("blob.ack.incomplete-refused", try await get(context, bob, blob.id, "/ack", method: "POST"), 409, "blob_incomplete")
        }
        await context.check("blob.part.last-completes") {
            let answer = try await put(context, alice, blob, part: 2)
            context.record("blob.part.last-completes", answer.status == 200 && answer.json["state"] as? String == "complete" && answer.json["received"] == nil,
                           "expected 200, complete; got \(answer.summary) \(answer.text.prefix(200))")
        }
        await context.check("blob.part.complete-blob-never-changes") {
            let other = try await put(context, alice, blob, part: 2, body: Data(randomBytes(blob.part(2).count)))
            context.expect("blob.part.complete-blob-never-changes", other, 409, "blob_complete")
        }
        await ranges(context, blob, reader: bob)
    }

    /// A part with a chunked body (no `Content-Length`) is refused `411` (raw socket: URLSession
    /// always sends a length).
    static func chunked(_ context: AuditContext, _ blob: Blob, _ author: AuditUser) async {
        let name = "blob.part.chunked-refused"
        await context.check(name) {
            guard let connection = try context.rawConnection() else { return context.skip(name, "needs a plain-HTTP address") }
            let body = blob.part(1).prefix(1000)
            connection.send("PUT /v1/blobs/\(blob.id)/parts/1 HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer \(author.session)\r\n"
                            + "Content-Type: application/octet-stream\r\n\(BlobLayout.digestHeader): \(digest(blob.part(1)))\r\n"
                            + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n\(String(body.count, radix: 16))\r\n")
            connection.send(String(decoding: [UInt8](repeating: 0x41, count: body.count), as: UTF8.self) + "\r\n0\r\n\r\n")
            let status = await connection.status(attempts: 20)
            context.record(name, status == 411, "a chunked part answered \(status.map(String.init) ?? "nothing") (expected 411)")
        }
    }

    /// Ranges of a complete blob of two parts, across the boundary and at its ends.
    static func ranges(_ context: AuditContext, _ blob: Blob, reader: AuditUser) async {
        let size = blob.bytes.count, boundary = blob.partSize
        await context.check("blob.download.range-across-parts") {
            let first = boundary - 1000, last = min(boundary + 999, size - 1)
            let answer = try await get(context, reader, blob.id, "/content", headers: ["Range": "bytes=\(first)-\(last)"])
            context.record("blob.download.range-across-parts",
                           answer.status == 206 && answer.body == blob.bytes.subdata(in: first..<last + 1)
                               && answer.headers["content-range"] == "bytes \(first)-\(last)/\(size)",
                           "expected 206 with bytes \(first)-\(last)/\(size); got \(answer.summary), \(answer.body.count) bytes, Content-Range \(answer.headers["content-range"] ?? "none")")
        }
        await context.check("blob.download.resume-from-an-offset") {
            let answer = try await get(context, reader, blob.id, "/content", headers: ["Range": "bytes=\(boundary)-"])
            context.record("blob.download.resume-from-an-offset", answer.status == 206 && answer.body == blob.bytes.subdata(in: boundary..<size),
                           "expected 206 with the rest; got \(answer.summary), \(answer.body.count) bytes")
        }
        await context.check("blob.download.suffix") {
            let answer = try await get(context, reader, blob.id, "/content", headers: ["Range": "bytes=-100"])
            context.record("blob.download.suffix", answer.status == 206 && answer.body == blob.bytes.suffix(100),
                           "expected 206 with the last 100 bytes; got \(answer.summary), \(answer.body.count) bytes")
        }
        for (name, range) in [("blob.download.range-past-the-end-refused", "bytes=\(size)-"),
                              ("blob.download.several-ranges-refused", "bytes=0-9,20-29"),
                              ("blob.download.backward-range-refused", "bytes=9-0")] {
            await context.check(name) {
                let answer = try await get(context, reader, blob.id, "/content", headers: ["Range": range])
                context.record(name, answer.status == 416 && answer.code == "invalid_range" && answer.headers["content-range"] == "bytes */\(size)",
                               "expected 416 invalid_range with Content-Range bytes */\(size); got \(answer.summary), \(answer.headers["content-range"] ?? "none")")
            }
        }
    }

    /// The same blob for two recipients: the first acknowledgement ends that recipient's access
    /// only; the last erases it for everyone, and no list names it again.
    static func erasure(_ context: AuditContext, _ alice: AuditUser) async {
        let name = "blob.erased-after-the-last-acknowledgement"
        let bob = context.bob!, mallory = context.mallory!
        await context.check(name) {
            guard let blob = try await make(context, name, author: alice, recipients: [bob.uid, mallory.uid]) else { return }
            guard try await upload(context, alice, blob) else { return context.record(name, false, "could not upload the blob") }
            let firstAck = try await get(context, bob, blob.id, "/ack", method: "POST")
            let secondAck = try await get(context, bob, blob.id, "/ack", method: "POST")
            let left = try await get(context, alice, blob.id).json["recipients"] as? [String]
            let stillThere = try await get(context, mallory, blob.id, "/content")
            guard firstAck.status == 204, secondAck.status == 404, left == [mallory.uid], stillThere.body == blob.bytes else {
                return context.record(name, false, "after the first of two acknowledgements: \(firstAck.summary), again \(secondAck.summary), recipients left \(left ?? []), the other recipient's download \(stillThere.summary)")
            }
            let lastAck = try await get(context, mallory, blob.id, "/ack", method: "POST")
            let author = try await get(context, alice, blob.id)
            let content = try await get(context, alice, blob.id, "/content")
            let listed = try await context.http.call("GET", "/v1/users/\(alice.uid)/blobs?role=author&limit=500", session: alice.session)
            context.record(name, lastAck.status == 204 && author.status == 404 && content.status == 404 && listed.status == 200 && !listed.text.contains(blob.id),
                           "after the last acknowledgement: \(lastAck.summary); the author's GET \(author.summary), download \(content.summary), list \(listed.summary)\(listed.text.contains(blob.id) ? " naming it" : "")")
        }
    }

    /// An author's unfinished uploads, and its blob bytes, are bounded. Each runs as a user of its
    /// own (whose create bucket is full) and deletes what it made.
    static func limits(_ context: AuditContext) async {
        await context.check("blob.limit.unfinished-uploads") {
            let author = try await context.signIn("blob-uploads")
            var made: [String] = []
            var refusal: AuditHTTP.Answer?
            for _ in 0..<64 {
                let answer = try await createPatiently(context, author, size: smallest, recipients: [context.bob.uid])
                guard answer.status == 201, let id = answer.json["id"] as? String else { refusal = answer; break }
                made.append(id)
            }
            for id in made { _ = try await get(context, author, id, method: "DELETE") }
            let after = try await create(context, author, size: smallest, recipients: [context.bob.uid])
            if after.status == 201, let id = after.json["id"] as? String { _ = try await get(context, author, id, method: "DELETE") }
            guard let refusal else { return context.skip("blob.limit.unfinished-uploads", "more than 64 unfinished uploads allowed") }
            context.record("blob.limit.unfinished-uploads",
                           refusal.status == 429 && refusal.code == "too_many_uploads" && refusal.headers["retry-after"] != nil && after.status == 201,
                           "after \(made.count) uploads: \(refusal.summary) (expected 429 too_many_uploads with Retry-After); after deleting them a create answered \(after.summary)")
        }
        await quota(context)
    }

    /// The blob quota: unfinished uploads of the largest file the relay takes (up to 128 MiB, so
    /// that the audit never reserves much) until the relay refuses. Where the quota is beyond
    /// what the unfinished uploads allowed can reach, it cannot be shown without uploading
    /// gigabytes: the check is skipped.
    static func quota(_ context: AuditContext) async {
        let name = "blob.limit.author-quota"
        await context.check(name) {
            let author = try await context.signIn("blob-quota")
            var made: [String] = []
            var size: Int64?
            let mebibytes: [Int64] = [128, 100, 64, 32, 16, 8, 4, 2, 1]
            for plain in mebibytes.map({ $0 << 20 }) {
                let id = BlobLayout.newID()
                let answer = try await create(context, author, id: id, size: sealedSize(plain), recipients: [context.bob.uid])
                if answer.status == 201 { made.append(id); size = sealedSize(plain); break }
                guard answer.code == "blob_too_large" else {
                    for id in made { _ = try await get(context, author, id, method: "DELETE") }
                    return context.record(name, false, "a create of a \(plain)-byte file answered \(answer.summary)")
                }
            }
            guard let size else { return context.record(name, false, "the relay took no file of 1 MiB") }
            var refusal: AuditHTTP.Answer?
            for _ in 0..<64 {
                let answer = try await createPatiently(context, author, size: size, recipients: [context.bob.uid])
                guard answer.status == 201, let id = answer.json["id"] as? String else { refusal = answer; break }
                made.append(id)
            }
            for id in made { _ = try await get(context, author, id, method: "DELETE") }
            switch refusal?.code {
            case "blob_quota":
                context.record(name, refusal?.status == 429 && refusal?.headers["retry-after"] != nil,
                               "expected 429 with Retry-After, got \(refusal?.summary ?? "none")")
            case "too_many_uploads", "storage_full":
                context.skip(name, "\(made.count) unfinished uploads of \(size) bytes stayed under the quota (\(refusal?.code ?? ""))")
            default:
                context.record(name, false, "after \(made.count) blobs of \(size) bytes: \(refusal?.summary ?? "no refusal within 64")")
            }
        }
    }
}

extension Bool {
    /// `value()` when true, nil otherwise.
    fileprivate func then<T>(_ value: () -> T) -> T? { self ? value() : nil }
}
