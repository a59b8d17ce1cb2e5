import Foundation
import MailslotTestSupport
import Testing
import MailslotCrypto
@testable import MailslotRelay
import MailslotWire

/// spec/openapi.yaml lists exactly the routes the router serves: a route added to one and not the
/// other fails here.
@Suite struct OpenAPITests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("spec/openapi.yaml")

    /// (METHOD, path) pairs under `paths:`, read from the document's layout: paths indented two
    /// spaces, operations four.
    static func documentedRoutes() throws -> Set<String> {
        let text = try String(contentsOf: document, encoding: .utf8)
        var routes: Set<String> = []
        var inPaths = false
        var path: String?
        let methods: Set<String> = ["get", "put", "post", "patch", "delete", "head", "options"]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("paths:") { inPaths = true; continue }
            guard inPaths else { continue }
            if let first = line.first, first != " ", first != "#" { break }  // the next top-level key
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":"),
                      methods.contains(String(line.dropFirst(4).dropLast())), let path {
                routes.insert("\(line.dropFirst(4).dropLast().uppercased()) \(path)")
            }
        }
        return routes
    }

    @Test func everyRouteIsDocumentedAndEveryDocumentedRouteExists() async throws {
        var configuration = RelayConfiguration()
        configuration.issuerKeys = [IdentityKeyPair().publicKey]
        configuration.dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-openapi-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        let relay = try Relay(configuration: configuration, logger: TestRelay.logger)
        let served = Set(relay.makeRouter().routes.map { "\($0.method.rawValue) \($0.path.description)" })
        let documented = try Self.documentedRoutes()
        #expect(served.count >= 18)
        #expect(served.subtracting(documented).isEmpty, "served but not in spec/openapi.yaml: \(served.subtracting(documented).sorted())")
        #expect(documented.subtracting(served).isEmpty, "in spec/openapi.yaml but not served: \(documented.subtracting(served).sorted())")
    }

    /// The lines of schema `name` under `components: schemas:` (indented four spaces), up to the next schema.
    static func schema(_ name: String) throws -> [Substring] {
        let lines = try String(contentsOf: document, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex(of: "    \(name):"), "schema \(name) in spec/openapi.yaml")
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.hasPrefix("    ") && !$0.hasPrefix("     ") || (!$0.isEmpty && !$0.hasPrefix(" ")) } ?? rest.endIndex
        return Array(rest[..<end])
    }

    /// The names of a schema's `required: [...]` list.
    static func required(_ schema: [Substring]) throws -> Set<String> {
        let line = try #require(schema.first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("required: [") })
        let list = line.split(separator: "[")[1].split(separator: "]")[0]
        return Set(list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
    }

    /// `KeyBundle` describes both versions the relay stores (spec/ratchet.md §2): each version's
    /// schema requires exactly the members the reference writes, with its `version`, and version 1
    /// refuses the members of version 2. A schema that knows only version 1 (or misses a member)
    /// fails here.
    @Test func keyBundleSchemaDescribesBothVersions() throws {
        let identity = IdentityKeyPair(), mailbox = MailboxKeyPair().publicKey
        let bundles = [1: KeyBundle(uid: "bob", identity: identity, mailboxKey: mailbox),
                       2: KeyBundle(uid: "bob", identity: identity, mailboxKey: mailbox,
                                    signedPrekey: PublishedPrekey(id: 1, key: MailboxKeyPair().publicKey))]
        let oneOf = try Self.schema("KeyBundle").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(oneOf.contains("oneOf:"))
        for (version, bundle) in bundles {
            let schema = try Self.schema("KeyBundleV\(version)")
            #expect(oneOf.contains(##"- $ref: "#/components/schemas/KeyBundleV\##(version)""##), "KeyBundle lists version \(version)")
            let members = try #require(try JSONSerialization.jsonObject(with: Data(bundle.encoded())) as? [String: Any])
            #expect(try Self.required(schema) == Set(members.keys), "KeyBundleV\(version) requires the members of a version \(version) bundle")
            #expect(schema.contains { $0.trimmingCharacters(in: .whitespaces) == "const: \(version)" }, "KeyBundleV\(version): version \(version)")
        }
        let v1 = try Self.schema("KeyBundleV1").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(v1.contains("- required: [signed_prekey_id]") && v1.contains("- required: [signed_prekey]"),
                "a version 1 bundle with a signed prekey member matches neither schema")
    }

    /// `SendRequest.envelope`'s `minLength` is the length of the smallest envelope the relay takes:
    /// 512 bytes in unpadded base64url. One character less is refused as the relay refuses it.
    @Test func envelopeMinimumLengthIsTheSmallestSizeClass() throws {
        let schema = try Self.schema("SendRequest")
        let line = try #require(schema.first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("minLength:") })
        let documented = try #require(Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)))
        let smallest = Base64URL.encode([UInt8](repeating: 7, count: Envelope.minimumSize))
        #expect(documented == smallest.utf8.count)
        let validation = SendValidation()
        #expect(try validation.checkContent(envelope: smallest, ttlSeconds: nil, keyID: nil).size == Envelope.minimumSize)
        let shorter = Base64URL.encode([UInt8](repeating: 7, count: Envelope.minimumSize - 1))
        #expect(shorter.utf8.count == documented - 1)
        #expect(throws: Problem.self) { try validation.checkContent(envelope: shorter, ttlSeconds: nil, keyID: nil) }
    }

    /// The frame kinds of ``RelayFrame`` the relay sends. No `default`: a new kind does not compile
    /// until it is numbered here, and ``everyFrameTheRelaySendsMatchesTheRelayFrameSchema()`` then
    /// wants a sample of it.
    static func kind(_ frame: RelayFrame) -> Int {
        switch frame {
        case .ready: 0
        case .message: 1
        case .acked: 2
        case .sent: 3
        case .error: 4
        case .prekeys: 5
        case .sentMany: 6
        case .unknown: -1  // a newer relay's frame, never sent by this one
        }
    }
    static let kinds = 7

    /// Frames of every kind, as the relay writes them (``Subscriptions/text(_:)``), with the
    /// numbers at their ends: the largest prekey count, a problem's longest `retry_after`.
    static func sampleFrames() -> [RelayFrame] {
        let envelope = Base64URL.encode([UInt8](repeating: 7, count: Envelope.minimumSize))
        let stored = StoredMessage(seq: 42, recipient: "bob", id: "message-0000000001", author: "alice", createdAt: 1_800_000_000_000,
                                   expiresAt: 1_800_003_600_000, envelope: envelope, size: Envelope.minimumSize)
        let leased = StoredMessage(seq: Int64.max, recipient: "bob", id: "message-0000000002", author: "bob", createdAt: 1_800_000_000_000,
                                   expiresAt: 1_800_003_600_000, envelope: envelope, size: Envelope.minimumSize,
                                   leaseUntil: 1_800_000_060_000, leaseHolder: "worker-1")
        return [
            .ready(pending: 0, prekeys: 0),
            .ready(pending: 3, prekeys: RelayAnswers.maxPrekeyCount),
            .ready(pending: 3),
            .message(stored.record(forOwner: true)),
            .message(leased.record(forOwner: true)),
            .acked(id: "message-0000000001"),
            .sent(ref: "r1", created: true, message: stored.record(forOwner: false)),
            .sent(ref: "r2", created: false, message: leased.record(forOwner: true)),
            .error(Problem(.invalidMessageID, "not a message id"), id: "message-0000000001"),
            .error(Problem(.rateLimited, "too many messages; slow down", retryAfter: 1), ref: "r3"),
            .error(Problem.unavailable),
            .error(Problem(.prekeyClaimsLimited, "too many prekey claims; slow down",
                           retryAfter: RateLimiter.retryAfter(seconds: .greatestFiniteMagnitude))),
            .prekeys(PrekeyCount.lowWater - 1),
            .prekeys(0),
            .sentMany(ref: "r4", results: [
                BatchResult(to: "bob", id: "message-0000000001", outcome: .stored(created: true, message: stored.record(forOwner: false))),
                BatchResult(to: "alice", id: "message-0000000001", outcome: .stored(created: false, message: leased.record(forOwner: true))),
                BatchResult(to: "carol", id: "message-0000000001", outcome: .refused(Problem(.staleKeys, "fetch the keys again"))),
                BatchResult(to: "dave", id: "message-0000000001",
                            outcome: .refused(Problem(.rateLimited, "too many messages; slow down", retryAfter: 6))),
            ]),
            .sentMany(ref: "r5", results: []),
        ]
    }

    /// Every kind of frame the relay sends, as it writes it, matches spec/openapi.yaml's
    /// `RelayFrame` (exactly one of its `oneOf`), checked as a validating client would
    /// (``OpenAPISchema``). A frame the schema does not describe — the `prekeys` frame before it
    /// was added — fails here.
    @Test func everyFrameTheRelaySendsMatchesTheRelayFrameSchema() throws {
        let schema = try OpenAPISchema(document: try String(contentsOf: Self.document, encoding: .utf8))
        let frames = Self.sampleFrames()
        #expect(Set(frames.map(Self.kind)) == Set(0..<Self.kinds), "a sample of every kind")
        for frame in frames {
            let text = Subscriptions.text(frame)
            let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            let violations = try schema.violations(of: value, schema: "RelayFrame")
            #expect(violations.isEmpty, "\(text): \(violations)")
        }
        // The checker refuses what the schema refuses: numbers out of their range, a missing member, an unknown type.
        for text in [#"{"type":"prekeys","prekeys":-1}"#, #"{"type":"prekeys","prekeys":4294967296}"#, #"{"type":"prekeys"}"#,
                     #"{"pending":0,"prekeys":4294967296,"type":"ready"}"#, #"{"type":"novel"}"#,
                     #"{"problem":{"code":"unavailable","retry_after":2147483648,"status":503,"title":"unavailable"},"type":"error"}"#] {
            let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            #expect(try !schema.violations(of: value, schema: "RelayFrame").isEmpty, "\(text) is refused")
        }
    }

    /// The answers' numbers the client checks (spec/protocol.md §4) have the same bounds in the
    /// schemas: a prekey count 0 … 2³²−1, `retry_after` 0 … 2³¹−1.
    @Test func answerNumbersHaveTheBoundsTheClientChecks() throws {
        let schema = try OpenAPISchema(document: try String(contentsOf: Self.document, encoding: .utf8))
        func valid(_ text: String, _ name: String) throws -> Bool {
            try schema.violations(of: try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)), schema: name).isEmpty
        }
        #expect(try valid(#"{"count":0}"#, "PrekeyCount") && valid(#"{"count":4294967295}"#, "PrekeyCount"))
        #expect(try !valid(#"{"count":4294967296}"#, "PrekeyCount") && !valid(#"{"count":-1}"#, "PrekeyCount"))
        let problem = #"{"code":"prekey_claims_limited","status":429,"title":"prekey claims limited","retry_after":"#
        #expect(try valid(problem + "0}", "Problem") && valid(problem + "\(RelayAnswers.maxRetryAfter)}", "Problem"))
        #expect(try !valid(problem + "-1}", "Problem") && !valid(problem + "\(RelayAnswers.maxRetryAfter + 1)}", "Problem"))
    }
}
