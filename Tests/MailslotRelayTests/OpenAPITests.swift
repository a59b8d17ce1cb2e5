import Foundation
import MailslotTestSupport
import Testing
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

    /// `KeyBundle` describes both versions the relay stores (spec/sessions.md §2): each version's
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
}
