import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import Testing
@testable import MailslotRelay
import MailslotWire

/// A real relay on 127.0.0.1 and a free port, with a temporary data folder and its own issuer key,
/// plus a small HTTP client for the tests.
final class TestRelay: Sendable {
    let relay: Relay
    let port: Int
    let issuer: IdentityKeyPair
    let dataDirectory: String
    private let running: RunningRelay

    static let logger: Logger = {
        var logger = Logger(label: "test-relay")
        logger.logLevel = .error
        return logger
    }()

    /// Starts a relay; `configure` adjusts the defaults. `dataDirectory` reuses a folder (restarts).
    static func start(issuer: IdentityKeyPair = IdentityKeyPair(), dataDirectory: String? = nil, logger: Logger = TestRelay.logger,
                      _ configure: (inout RelayConfiguration) -> Void = { _ in }) async throws -> TestRelay {
        var configuration = RelayConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.dataDirectory = dataDirectory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-relay-\(UUID().uuidString)").path
        configuration.issuerKeys = [issuer.publicKey]
        configuration.audience = "test.relay"
        configuration.erasureDelay = 0.05
        // A test relay keeps no disk reserve and refuses no creates for lack of space (DiskFullTests covers those).
        configuration.minFreeBytes = 0
        configuration.reserveBytes = 0
        configure(&configuration)
        let relay = try Relay(configuration: configuration, logger: logger)
        return TestRelay(relay: relay, running: try await relay.start(), issuer: issuer, dataDirectory: configuration.dataDirectory)
    }

    private init(relay: Relay, running: RunningRelay, issuer: IdentityKeyPair, dataDirectory: String) {
        self.relay = relay
        self.running = running
        self.port = running.port
        self.issuer = issuer
        self.dataDirectory = dataDirectory
    }

    /// Stops the relay gracefully (and checkpoints, as `serve` does).
    func stop() async throws {
        try await running.stop()
    }

    /// Stops the relay and deletes its data.
    func finish() async throws {
        try await stop()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    // MARK: HTTP

    struct Answer {
        let status: Int
        let headers: [String: String]
        let body: Data
        var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:] }
        var code: String? { json["code"] as? String }
    }

    /// One HTTP request; `body` is sent as is (JSON objects are serialised).
    func call(_ method: String, _ path: String, session: String? = nil, body: Any? = nil,
              headers: [String: String] = [:]) async throws -> Answer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        if let session { request.setValue("Bearer \(session)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        switch body {
        case nil: break
        case let data as Data: request.httpBody = data
        case let text as String: request.httpBody = Data(text.utf8)
        case let object?: request.httpBody = try JSONSerialization.data(withJSONObject: object)
        }
        if request.httpBody != nil, headers["Content-Type"] == nil {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields { fields["\(name)".lowercased()] = "\(value)" }
        return Answer(status: http.statusCode, headers: fields, body: data)
    }

    /// A custom token for `uid` from this relay's issuer.
    func token(_ uid: String, lifetime: Int64 = 300) throws -> String {
        try TokenIssuer(key: issuer, audience: "test.relay").mint(uid: uid, lifetime: lifetime)
    }

    /// Signs `uid` in; the session grant's fields.
    func signIn(_ uid: String) async throws -> (session: String, refresh: String) {
        let answer = try await call("POST", "/v1/sessions", body: ["token": try token(uid)])
        #expect(answer.status == 201, "sign-in of \(uid): \(String(decoding: answer.body, as: UTF8.self))")
        return (answer.json["session"] as? String ?? "", answer.json["refresh"] as? String ?? "")
    }

    /// Puts an envelope of `size` random bytes into `recipient`'s mailbox.
    @discardableResult
    func send(_ session: String, to recipient: String, id: String, envelope: [UInt8]? = nil, ttl: Int64? = nil) async throws -> Answer {
        var body: [String: Any] = ["envelope": Base64URL.encode(envelope ?? randomBytes(512))]
        if let ttl { body["ttl_seconds"] = ttl }
        return try await call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: session, body: body)
    }
}

/// Runs `body` with a relay started for it, and stops the relay (deleting its data) before
/// returning, whether `body` succeeded or threw.
func withTestRelay<T>(dataDirectory: String? = nil, _ configure: (inout RelayConfiguration) -> Void = { _ in },
                      _ body: (TestRelay) async throws -> T) async throws -> T {
    let relay = try await TestRelay.start(dataDirectory: dataDirectory, configure)
    do {
        let value = try await body(relay)
        try await relay.finish()
        return value
    } catch {
        try? await relay.finish()
        throw error
    }
}

/// A fresh, valid, time-ordered-looking message id.
func messageID(_ n: Int = Int.random(in: 0..<1_000_000)) -> String {
    let digits = String(n)
    return "01KF" + String(repeating: "0", count: 22 - digits.count) + digits
}
