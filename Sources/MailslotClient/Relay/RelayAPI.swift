import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MailslotWire

/// What went wrong talking to the relay, or with a contact's keys. Each case names what it
/// carries; match them by case (`catch ClientError.keyChanged(let uid)`).
public enum ClientError: Error, Equatable, Sendable {
    /// The relay answered with `problem` (its stable `Problem.code` says which: spec/protocol.md §3).
    case relay(problem: Problem)
    /// The relay could not be reached (network, DNS, refused connection, timeout); `reason` says
    /// how, for a log or a person — not to be matched on.
    case unreachable(reason: String)
    /// The relay answered something that is not the protocol; `detail` says what, for a log.
    case invalidResponse(detail: String)
    /// No identity yet: sign in first.
    case notSignedIn
    /// User `uid` has published no keys, so nothing can be sealed to them.
    case noKeys(uid: String)
    /// The relay served a key bundle for `uid` that fails verification; `code` is the key bundle
    /// error code (spec/envelope.md).
    case invalidKeys(uid: String, code: String)
    /// Contact `uid`'s identity key changed since it was pinned (or a comparison of it failed):
    /// refused until the user trusts it (``MailslotClient/trust(_:safetyNumber:)``).
    case keyChanged(uid: String)
    /// The message cannot be sealed; `code` is the envelope or message error code (spec/envelope.md).
    case cannotSeal(code: String)
    /// `text` is not a uid (spec/protocol.md §2): refused here, before anything is asked of the relay.
    case invalidUID(text: String)
    /// The local store belongs to `owner`, not to `requested`: one store, one uid.
    case profileMismatch(owner: String, requested: String)
    /// No sent message `id` is undelivered or held: there is nothing to send again.
    case notResendable(id: String)
    /// Not a safety number: ``MailslotClient/trust(_:safetyNumber:)`` takes 60 digits (spaces and
    /// line breaks between them are ignored).
    case invalidSafetyNumber
    /// The safety number given to ``MailslotClient/trust(_:safetyNumber:)`` for contact `uid` is
    /// not the number of the keys trusting would install (the contact's offered key while it
    /// changed, otherwise the pinned one): nothing was trusted. The user compared another key, or
    /// the relay offered another bundle since the number was shown.
    case safetyNumberMismatch(uid: String)
    /// The file at `path` cannot be read, or is not a regular file (a folder, a device, a pipe).
    case unreadableFile(path: String)
    /// A push target the client can tell is wrong without asking the relay (a key of the wrong
    /// length, a token outside its grammar); `reason` says what, for people. Nothing was registered.
    case invalidPushTarget(reason: String)
    /// The relay does not send wake-ups through `provider` (`400 push_provider_disabled`): its
    /// operator did not configure it. Nothing was registered; an app may say "this server does not
    /// support wake-ups on this platform". ``MailslotClient/MailslotClient/pushConfiguration()``
    /// tells which providers it has.
    case pushProviderDisabled(provider: PushProviderKind)

    /// This device knows no group `id` (it never was a member, or never received its welcome).
    case unknownGroup(GroupID)
    /// This user is not a member of group `id` (removed, or left): it sends nothing to it.
    case notGroupMember(GroupID)
    /// This user is not an admin of group `id`: only admins add, remove, promote, demote and rename.
    case notGroupAdmin(GroupID)
    /// The change is not one the fold would accept (spec/groups.md §3.2): demoting or removing a
    /// senior admin, adding a member, removing a non-member, leaving members without an admin;
    /// `reason` says which, for people. Nothing was stored or sent.
    case groupChangeNotAllowed(reason: String)
    /// The group would exceed the format's limits: over 1,000 members or 48 KiB of state (long
    /// uids fit fewer members). Nothing was stored or sent.
    case groupTooLarge
    /// A group name or member list the format refuses (`code`, spec/groups.md §2.3: a name over
    /// 128 bytes or with control characters, an invalid uid). Nothing was stored or sent.
    case invalidGroup(code: String)
    /// A typing indicator to a group of more than 32 members (spec/groups.md §4.4): one keystroke
    /// would be a message to each of the `members` − 1 others. Nothing was sent.
    case groupTooLargeForTyping(members: Int)
    /// A receipt to a group naming message `id`, which this device did not receive in that group:
    /// a group receipt goes to the authors of the messages it names (spec/groups.md §4.4), and
    /// this one has none. Nothing was sent.
    case unknownGroupMessage(id: String)

    /// The reason stored with a message held because its recipient's identity key changed.
    static let keyChangedCode = "key_changed"
}

/// The relay's HTTP API (spec/protocol.md), as plain async calls.
struct RelayAPI: Sendable {
    let base: URL
    let session: URLSession

    init(base: URL) {
        self.base = base
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 15
        session = URLSession(configuration: configuration)
    }

    func signIn(token: String) async throws -> SessionGrant {
        try decode(SessionGrant.self, try await call("POST", "/v1/sessions", body: JSONEncoder().encode(SignInRequest(token: token))))
    }

    func refresh(_ refresh: String) async throws -> SessionGrant {
        try decode(SessionGrant.self, try await call("POST", "/v1/sessions/refresh", body: JSONEncoder().encode(RefreshRequest(refresh: refresh))))
    }

    func signOut(session: String) async throws {
        _ = try await call("DELETE", "/v1/sessions/current", session: session)
    }

    func putKeys(_ bundle: KeyBundle, session: String) async throws {
        _ = try await call("PUT", "/v1/users/\(bundle.uid)/keys", session: session, body: Data(bundle.encoded()))
    }

    func keys(of uid: String, session: String) async throws -> Data {
        try await call("GET", "/v1/users/\(uid)/keys", session: session)
    }

    /// Creates message `id` in `recipient`'s mailbox. `wake: false` is sent as such (the default,
    /// true, is left out, so that a relay that predates wake-ups reads the same request).
    func send(to recipient: String, id: String, envelope: [UInt8], keyID: String?, wake: Bool = true, session: String) async throws -> MessageRecord {
        try decode(MessageRecord.self, try await call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: session,
                                                      body: JSONEncoder().encode(SendRequest(envelope: envelope, keyID: keyID, wake: wake ? nil : false))))
    }

    /// Creates many messages at once (`POST /v1/messages`, spec/protocol.md §4.25): one result per
    /// entry, in entry order, each what the single create would have answered. A relay answering
    /// another number of results, or results for other (recipient, id) pairs, is not the protocol.
    func sendMany(_ entries: [BatchEntry], wake: Bool = true, session: String) async throws -> [BatchResult] {
        let request = BatchCreateRequest(entries: entries, wake: wake ? nil : false)
        let response = try decode(BatchResponse.self, try await call("POST", "/v1/messages", session: session, body: JSONEncoder().encode(request)))
        guard BatchResponse.results(response.results, answer: entries) else {
            throw ClientError.invalidResponse(detail: "the relay answered a batch of \(entries.count) with \(response.results.count) results, or for other recipients")
        }
        return response.results
    }

    func list(_ uid: String, after: String?, session: String) async throws -> MessagePage {
        let query = after.map { "?after=\($0)" } ?? ""
        return try decode(MessagePage.self, try await call("GET", "/v1/users/\(uid)/messages\(query)", session: session))
    }

    func delete(owner: String, id: String, session: String) async throws {
        _ = try await call("DELETE", "/v1/users/\(owner)/messages/\(id)", session: session)
    }

    func block(owner: String, author: String, session: String) async throws {
        _ = try await call("PUT", "/v1/users/\(owner)/blocked/\(author)", session: session)
    }

    /// Takes `author` off `owner`'s block list (spec/protocol.md §4.12); `404 not_found` when it was not on it.
    func unblock(owner: String, author: String, session: String) async throws {
        _ = try await call("DELETE", "/v1/users/\(owner)/blocked/\(author)", session: session)
    }

    /// Adds one-time prekeys (1 to ``PrekeyUpload/maximumBatch``, ids distinct) to `owner`'s
    /// supply on the relay; the number it holds afterwards. Repeating an upload is safe.
    func uploadPrekeys(_ prekeys: [Prekey], owner: String, session: String) async throws -> Int {
        try decode(PrekeyCount.self, try await call("POST", "/v1/users/\(owner)/prekeys", session: session,
                                                    body: JSONEncoder().encode(PrekeyUpload(prekeys: prekeys)))).count
    }

    /// The number of one-time prekeys the relay holds for `owner`.
    func prekeyCount(owner: String, session: String) async throws -> Int {
        try decode(PrekeyCount.self, try await call("GET", "/v1/users/\(owner)/prekeys", session: session)).count
    }

    /// Withdraws all of `owner`'s one-time prekeys from the relay.
    func deletePrekeys(owner: String, session: String) async throws {
        _ = try await call("DELETE", "/v1/users/\(owner)/prekeys", session: session)
    }

    /// Claims one of `uid`'s one-time prekeys (the relay erases it); nil when none is left, and
    /// the sender falls back to the bundle's key. A key that is not a usable X25519 key is the
    /// relay's error, never used.
    func claimPrekey(for uid: String, session: String) async throws -> (id: UInt32, key: MailboxPublicKey)? {
        let claim = try decode(PrekeyClaim.self, try await call("POST", "/v1/users/\(uid)/prekeys/claim", session: session,
                                                                body: JSONEncoder().encode(PrekeyClaimRequest())))
        guard let prekey = claim.prekey else { return nil }
        guard let key = prekey.publicKey, key.isUsable else {  // the id was range-checked when decoded
            throw ClientError.invalidResponse(detail: "the relay served prekey \(prekey.id), which is not a usable X25519 key")
        }
        return (prekey.id, key)
    }

    /// One request; a problem answer becomes ``ClientError/relay(_:)``.
    func call(_ method: String, _ path: String, session: String? = nil, body: Data? = nil) async throws -> Data {
        try await exchange(method, path, session: session, body: body).data
    }

    /// One request with its own headers (`Content-Type` defaults to JSON when there is a body);
    /// the answer's body and head. A problem answer becomes ``ClientError/relay(_:)``.
    func exchange(_ method: String, _ path: String, session: String? = nil, body: Data? = nil,
                  headers: [String: String] = [:]) async throws -> (data: Data, response: HTTPURLResponse) {
        // Every uid and id in `path` was checked against the identifier grammar: no escaping needed.
        guard let url = URL(string: base.absoluteString.trimmingTrailingSlash + path) else {
            throw ClientError.invalidResponse(detail: "cannot form a URL for \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let session { request.setValue("Bearer \(session)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let data: Data, response: URLResponse
        do { (data, response) = try await self.session.data(for: request) } catch {
            throw ClientError.unreachable(reason: "\(base.host ?? "relay"): \(error.localizedDescription)")
        }
        guard let http = response as? HTTPURLResponse else { throw ClientError.invalidResponse(detail: "not HTTP") }
        guard (200..<300).contains(http.statusCode) else {
            if let problem = try? RelayAnswers.decode(Problem.self, from: data) { throw ClientError.relay(problem: problem) }
            throw ClientError.invalidResponse(detail: "HTTP \(http.statusCode) without a problem body")
        }
        return (data, http)
    }

    /// An answer through ``RelayAnswers/decode(_:from:)``, the one decoder of what a relay sends
    /// (strict JSON, every number range-checked); a refusal is ``ClientError/invalidResponse(_:)``,
    /// handled like any bad answer.
    func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do { return try RelayAnswers.decode(type, from: data) } catch {
            throw ClientError.invalidResponse(detail: "the relay's \(T.self) answer: \(error)")
        }
    }

    /// The subscription URL (`ws://` or `wss://`).
    func subscribeURL(_ uid: String) -> String {
        var text = base.absoluteString.trimmingTrailingSlash
        if text.hasPrefix("https://") { text = "wss://" + text.dropFirst(8) } else if text.hasPrefix("http://") { text = "ws://" + text.dropFirst(7) }
        return text + "/v1/users/\(uid)/subscribe"
    }
}

extension String {
    var trimmingTrailingSlash: String { hasSuffix("/") ? String(dropLast()) : self }
}
