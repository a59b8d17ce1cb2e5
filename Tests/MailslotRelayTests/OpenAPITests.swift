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
}
