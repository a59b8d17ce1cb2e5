import Foundation
import MailslotWire

/// A throwaway user of one run: signed in, with its own keys (published in e2e mode).
struct BenchUser: Sendable {
    let uid: String
    /// The session for `Authorization: Bearer` (never printed).
    let session: String
    let identity: IdentityKeyPair
    let mailbox: MailboxKeyPair
}

/// Creating the run's users: uids under a prefix no other run shares, so runs against one relay
/// never meet, and nothing needs cleaning up between them.
enum Users {
    /// `bench-` and 10 random base32 characters.
    static func runPrefix() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        return "bench-" + String(randomBytes(10).map { alphabet[Int($0 & 31)] })
    }

    /// Mints a token for each uid, signs it in, and (when `publish`) publishes its key bundle —
    /// at most `concurrency` users at a time.
    static func signIn(_ uids: [String], target: RelayTarget, publish: Bool, concurrency: Int = 16) async throws -> [BenchUser] {
        let issuer = target.issuer, http = target.http
        return try await boundedMap(uids, limit: concurrency) { uid in
            let token: String
            do throws(TokenError) { token = try issuer.mint(uid: uid, lifetime: 600) } catch {
                throw BenchFailure.failed("cannot mint a token for \(uid): \(error.code)")
            }
            let grant = try await http.signIn(token: token)
            let user = BenchUser(uid: uid, session: grant.session, identity: IdentityKeyPair(), mailbox: MailboxKeyPair())
            if publish {
                try await http.publish(KeyBundle(uid: uid, identity: user.identity, mailboxKey: user.mailbox.publicKey), session: user.session)
            }
            return user
        }
    }

    /// Fetches and verifies the key bundles of `uids` as `reader` would see them, once each: what a
    /// client pins on first contact.
    static func bundles(of uids: [String], reader: BenchUser, http: RelayHTTP) async throws -> [String: KeyBundle] {
        let fetched = try await boundedMap(uids, limit: 16) { uid in (uid, try await http.keys(of: uid, session: reader.session)) }
        return Dictionary(fetched, uniquingKeysWith: { first, _ in first })
    }
}

/// The plaintext of every message of a run: a text chat message whose encoded body is `size` bytes
/// (or as close as the message's own fields allow), and the envelope size that follows.
struct MessageBody: Sendable {
    /// The text that pads the body to the requested size.
    let text: String
    /// The encoded body's length in bytes.
    let bodyBytes: Int
    /// The envelope's length (its size class).
    let envelopeBytes: Int

    /// The body for messages from a sender uid of `senderUIDLength` bytes to a recipient uid of
    /// `recipientUIDLength` bytes, under ids of ``BenchID/length``.
    init(size: Int, senderUID: String, recipientUIDLength: Int) throws {
        func body(_ text: String) throws -> [UInt8] {
            try ChatMessage(type: .text, sender: Sender(id: senderUID), payload: Payload(text: text),
                            timestamp: 1_700_000_000_000).encoded()
        }
        let overhead = try body("x").count - 1
        text = String(repeating: "x", count: max(1, size - overhead))
        bodyBytes = try body(text).count
        // The record: 104 fixed bytes + the uids + the id + the body (spec/envelope.md §2.3).
        let record = 104 + senderUID.utf8.count + recipientUIDLength + BenchID.length + bodyBytes
        guard let envelope = Envelope.sizeClass(forRecordLength: record) else {
            throw BenchFailure.usage("--size \(size) does not fit in the largest envelope (1 MiB)")
        }
        envelopeBytes = envelope
    }

    /// An envelope sealed once, for real, from `sender` to `recipient` (relay mode sends it for
    /// every message to that recipient: the relay never opens it, and its size class is right).
    func presealed(from sender: BenchUser, to recipient: String, mailboxKey: MailboxPublicKey) throws -> String {
        let sealed = try Envelope.seal(message(from: sender.uid), id: BenchID.make(sender: 0, sequence: 0, time: 0),
                                       from: sender.uid, identity: sender.identity, to: recipient, mailboxKey: mailboxKey)
        guard sealed.count == envelopeBytes else {
            throw BenchFailure.failed("sealed \(sealed.count) bytes where \(envelopeBytes) were expected")
        }
        return Base64URL.encode(sealed)
    }

    /// The chat message as a client composes it now.
    func message(from sender: String) -> ChatMessage {
        ChatMessage(type: .text, sender: Sender(id: sender), payload: Payload(text: text),
                    timestamp: Int64(Date().timeIntervalSince1970 * 1000))
    }
}
