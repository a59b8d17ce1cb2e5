import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MailslotWire

/// The relay's HTTP routes the bench needs (spec/protocol.md §4), for setup and checks only: the
/// measured traffic goes over WebSockets.
struct RelayHTTP: Sendable {
    /// `http://host:port`, without a trailing slash.
    let base: String
    private let session: URLSession

    init(base: String, timeout: Double = 10) {
        self.base = base.hasSuffix("/") ? String(base.dropLast()) : base
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout * 3
        configuration.httpMaximumConnectionsPerHost = 32
        session = URLSession(configuration: configuration)
    }

    /// The subscription URL of `uid` (`ws://…/v1/users/{uid}/subscribe`).
    func subscribeURL(_ uid: String) -> String {
        var text = base
        if text.hasPrefix("https://") { text = "wss://" + text.dropFirst(8) } else if text.hasPrefix("http://") { text = "ws://" + text.dropFirst(7) }
        return text + "/v1/users/\(uid)/subscribe"
    }

    /// One request: the status and the body. Throws only when no answer came.
    func call(_ method: String, _ path: String, bearer: String? = nil, body: Data? = nil) async throws -> (status: Int, body: Data) {
        guard let url = URL(string: base + path) else { throw BenchFailure.usage("cannot form a URL from \(base)\(path)") }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        do {
            let (data, response) = try await session.data(for: request)
            guard let http = response as? HTTPURLResponse else { throw BenchFailure.failed("\(method) \(path): not an HTTP answer") }
            return (http.statusCode, data)
        } catch let failure as BenchFailure {
            throw failure
        } catch {
            throw BenchFailure.unreachable("cannot reach the relay at \(base) (\(method) \(path)): \(error.localizedDescription)")
        }
    }

    /// Whether `GET /healthz` answers 200.
    func healthy() async -> Bool {
        guard let answer = try? await call("GET", "/healthz") else { return false }
        return answer.status == 200
    }

    /// `POST /v1/sessions` with a custom token.
    func signIn(token: String) async throws -> SessionGrant {
        let answer = try await call("POST", "/v1/sessions", body: try JSONEncoder().encode(SignInRequest(token: token)))
        guard answer.status == 201 else { throw refusal("sign-in", answer) }
        guard let grant = try? JSONDecoder().decode(SessionGrant.self, from: answer.body) else {
            throw BenchFailure.failed("sign-in answered 201 without a session grant")
        }
        return grant
    }

    /// `PUT /v1/users/{uid}/keys`.
    func publish(_ bundle: KeyBundle, session: String) async throws {
        let answer = try await call("PUT", "/v1/users/\(bundle.uid)/keys", bearer: session, body: Data(bundle.encoded()))
        guard answer.status == 204 else { throw refusal("publishing the key bundle of \(bundle.uid)", answer) }
    }

    /// `POST /v1/users/{uid}/prekeys`: adds one-time prekeys to the owner's supply (spec/protocol.md §4.14).
    func uploadPrekeys(_ prekeys: [Prekey], uid: String, session: String) async throws {
        let answer = try await call("POST", "/v1/users/\(uid)/prekeys", bearer: session,
                                    body: try JSONEncoder().encode(PrekeyUpload(prekeys: prekeys)))
        guard answer.status == 200 else { throw refusal("uploading the one-time prekeys of \(uid)", answer) }
    }

    /// `POST /v1/users/{uid}/prekeys/claim`: one of the owner's one-time prekeys, now gone from the
    /// relay; nil when none is left or the claim limits refuse (429), as a client then starts the
    /// ratchet with the signed prekey alone.
    func claimPrekey(of uid: String, session: String) async throws -> Prekey? {
        let answer = try await call("POST", "/v1/users/\(uid)/prekeys/claim", bearer: session, body: Data("{}".utf8))
        if answer.status == 429 { return nil }
        guard answer.status == 200, let claim = try? JSONDecoder().decode(PrekeyClaim.self, from: answer.body) else {
            throw refusal("claiming a one-time prekey of \(uid)", answer)
        }
        return claim.prekey
    }

    /// `GET /v1/users/{uid}/keys`, verified for `uid` as a client does before it pins or seals.
    func keys(of uid: String, session: String) async throws -> KeyBundle {
        let answer = try await call("GET", "/v1/users/\(uid)/keys", bearer: session)
        guard answer.status == 200 else { throw refusal("fetching the key bundle of \(uid)", answer) }
        do { return try KeyBundle.decode(Array(answer.body), for: uid) } catch {
            throw BenchFailure.failed("the relay served a key bundle for \(uid) that does not verify: \(error.code)")
        }
    }

    /// Every message waiting in `uid`'s mailbox, by listing it page by page (`GET …/messages`).
    func pendingIDs(of uid: String, session: String) async throws -> [String] {
        var ids: [String] = []
        var cursor: String?
        for _ in 0..<100_000 {
            let query = "?limit=500" + (cursor.map { "&after=\($0)" } ?? "")
            let answer = try await call("GET", "/v1/users/\(uid)/messages\(query)", bearer: session)
            guard answer.status == 200, let page = try? JSONDecoder().decode(MessagePage.self, from: answer.body) else {
                throw refusal("listing the mailbox of \(uid)", answer)
            }
            ids += page.messages.map(\.id)
            guard let next = page.next else { return ids }
            cursor = next
        }
        throw BenchFailure.failed("listing the mailbox of \(uid) did not end")
    }

    /// `GET /metrics` as Prometheus text, or nil when the relay does not serve it (or refuses us).
    func metrics(token: String?) async -> PrometheusText? {
        guard let answer = try? await call("GET", "/metrics", bearer: token), answer.status == 200 else { return nil }
        return PrometheusText(String(decoding: answer.body, as: UTF8.self))
    }

    private func refusal(_ what: String, _ answer: (status: Int, body: Data)) -> BenchFailure {
        let code = (try? JSONDecoder().decode(Problem.self, from: answer.body)).map { " \($0.code.rawValue)" } ?? ""
        return .failed("\(what) was refused: HTTP \(answer.status)\(code)")
    }
}

/// The samples of a Prometheus text exposition, summed over label sets by metric name; the
/// label sets are kept too, for the sums by one label (``sum(_:by:)``).
struct PrometheusText: Sendable {
    private(set) var values: [String: Double] = [:]
    /// Every labelled sample: its metric name, its label text (between the braces) and value.
    private var labelled: [(name: String, labels: Substring, value: Double)] = []

    init(_ text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            // `name value`, or `name{labels} value`, where label values may hold spaces.
            let name: Substring, rest: Substring
            if let brace = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}") {
                name = line[..<brace]
                rest = line[line.index(after: close)...]
            } else if let space = line.firstIndex(of: " ") {
                name = line[..<space]
                rest = line[space...]
            } else {
                continue
            }
            guard let text = rest.split(separator: " ").first, let value = Double(text) else { continue }
            values[String(name), default: 0] += value
            if let brace = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}"), brace < close {
                labelled.append((String(name), line[line.index(after: brace)..<close], value))
            }
        }
    }

    subscript(_ name: String) -> Double? { values[name] }

    /// The samples of `name` summed by the value of their label `label` (e.g.
    /// `mailslot_push_failed_total` by `reason`); samples without that label are left out.
    func sum(_ name: String, by label: String) -> [String: Double] {
        var sums: [String: Double] = [:]
        for sample in labelled where sample.name == name {
            if let value = Self.labels(sample.labels)[label] { sums[value, default: 0] += sample.value }
        }
        return sums
    }

    /// `a="x",b="y \"z\""` → ["a": "x", "b": "y \"z\""]: the exposition format's label pairs,
    /// with its escapes (`\\`, `\"`, `\n`) undone. Stops at the first malformed pair.
    static func labels(_ text: Substring) -> [String: String] {
        var result: [String: String] = [:]
        var rest = text[...]
        while let equals = rest.firstIndex(of: "=") {
            let key = rest[..<equals].trimmingCharacters(in: CharacterSet(charactersIn: ", "))
            rest = rest[rest.index(after: equals)...]
            guard rest.first == "\"" else { break }
            rest = rest.dropFirst()
            var value = "", escaped = false, closed = false
            while let character = rest.first {
                rest = rest.dropFirst()
                if escaped {
                    value.append(character == "n" ? "\n" : character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    closed = true
                    break
                } else {
                    value.append(character)
                }
            }
            guard closed else { break }
            result[key] = value
        }
        return result
    }
}
