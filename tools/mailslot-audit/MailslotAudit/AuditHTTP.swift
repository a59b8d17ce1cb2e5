import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The audit's HTTP client: one request at a time as a client would send it, with the answer's
/// status, headers and body kept for the checks. Bounded: every request times out. The tests'
/// HTTP client (`TestRelay` in Tests/Support) is this one too.
public struct AuditHTTP: Sendable {
    /// The relay's base URL, `http://host:port`.
    public let base: URL

    /// A client of the relay at `base`.
    public init(base: URL) { self.base = base }

    /// One session for every audit in the process: no cookies, no cache.
    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 15
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        return URLSession(configuration: configuration)
    }()

    /// What came back.
    public struct Answer: Sendable {
        /// The HTTP status.
        public let status: Int
        /// The header fields, names in lower case.
        public let headers: [String: String]
        /// The body as received.
        public let body: Data
        /// The body as text.
        public var text: String { String(decoding: body, as: UTF8.self) }
        /// The body as a JSON object (empty when it is not one).
        public var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:] }
        /// A problem answer's `code`.
        public var code: String? { json["code"] as? String }
        /// `status code`, for failure messages.
        public var summary: String { "\(status)\(code.map { " \($0)" } ?? "")" }
    }

    /// One request to `path` (sent as written: percent-escapes are not decoded). `body` is JSON
    /// unless it is `Data` or a `String`, which go as they are.
    public func call(_ method: String, _ path: String, session token: String? = nil, body: Any? = nil,
              headers: [String: String] = [:]) async throws -> Answer {
        guard let url = URL(string: base.absoluteString.trimmingSuffix("/") + path) else { throw AuditError("bad path \(path)") }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        switch body {
        case nil: break
        case let data as Data: request.httpBody = data
        case let text as String: request.httpBody = Data(text.utf8)
        case let object?: request.httpBody = try JSONSerialization.data(withJSONObject: object)
        }
        if request.httpBody != nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await Self.session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw AuditError("not an HTTP answer") }
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields { fields["\(name)".lowercased()] = "\(value)" }
        return Answer(status: http.statusCode, headers: fields, body: data)
    }
}

extension String {
    func trimmingSuffix(_ suffix: String) -> String { hasSuffix(suffix) ? String(dropLast(suffix.count)) : self }
}
