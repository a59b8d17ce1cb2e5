import Foundation
import MailslotWire

/// A throwaway user of one run: signed in, with its own keys (published in e2e mode).
struct BenchUser: Sendable {
    let uid: String
    /// The session for `Authorization: Bearer` (never printed).
    let session: String
    let identity: IdentityKeyPair
    let mailbox: MailboxKeyPair
    /// The signed prekey a version 2 bundle publishes (id ``signedPrekeyID``), for ratchets.
    let signedPrekey: X25519KeyPair
    /// The one-time prekeys it uploaded, by id (from 1).
    let oneTimePrekeys: [UInt32: X25519KeyPair]

    /// The id of every bench user's one signed prekey.
    static let signedPrekeyID: UInt32 = 1
}

/// Creating the run's users: uids under a prefix no other run shares, so runs against one relay
/// never meet, and nothing needs cleaning up between them.
enum Users {
    /// `bench-` and 10 random base32 characters.
    static func runPrefix() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        return "bench-" + String(randomBytes(10).map { alphabet[Int($0 & 31)] })
    }

    /// Mints a token for each uid, signs it in, and (when `publish` names a bundle version)
    /// publishes its key bundle — version 2 with its signed prekey, and `oneTimePrekeys` one-time
    /// prekeys uploaded — at most `concurrency` users at a time.
    static func signIn(_ uids: [String], target: RelayTarget, publish: EnvelopeVersion?, oneTimePrekeys: Int = 0,
                       concurrency: Int = 16) async throws -> [BenchUser] {
        let issuer = target.issuer, http = target.http
        return try await boundedMap(uids, limit: concurrency) { uid in
            let token: String
            do throws(TokenError) { token = try issuer.mint(uid: uid, lifetime: 600) } catch {
                throw BenchFailure.failed("cannot mint a token for \(uid): \(error.code)")
            }
            let grant = try await http.signIn(token: token)
            let prekeyCount = publish == .v2 ? UInt32(max(0, oneTimePrekeys)) : 0
            let user = BenchUser(uid: uid, session: grant.session, identity: IdentityKeyPair(), mailbox: MailboxKeyPair(),
                                 signedPrekey: X25519KeyPair(),
                                 oneTimePrekeys: Dictionary(uniqueKeysWithValues: (0..<prekeyCount).map { ($0 + 1, X25519KeyPair()) }))
            if let publish {
                let prekey = publish == .v2 ? PublishedPrekey(id: BenchUser.signedPrekeyID, key: user.signedPrekey.publicKey) : nil
                try await http.publish(KeyBundle(uid: uid, identity: user.identity, mailboxKey: user.mailbox.publicKey, signedPrekey: prekey),
                                       session: user.session)
                let uploads = user.oneTimePrekeys.sorted { $0.key < $1.key }.map { Prekey(id: $0.key, key: $0.value.publicKey) }
                for batch in stride(from: 0, to: uploads.count, by: PrekeyUpload.maximumBatch) {
                    try await http.uploadPrekeys(Array(uploads[batch..<min(batch + PrekeyUpload.maximumBatch, uploads.count)]),
                                                 uid: uid, session: user.session)
                }
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
    /// `recipientUIDLength` bytes, under ids of ``BenchID/length``, in envelopes of `version`.
    init(size: Int, senderUID: String, recipientUIDLength: Int, version: EnvelopeVersion = .v1) throws {
        func body(_ text: String) throws -> [UInt8] {
            try ChatMessage(type: .text, sender: Sender(id: senderUID), payload: Payload(text: text),
                            timestamp: 1_700_000_000_000).encoded()
        }
        let overhead = try body("x").count - 1
        text = String(repeating: "x", count: max(1, size - overhead))
        bodyBytes = try body(text).count
        guard let envelope = Self.envelopeBytes(body: bodyBytes, senderUIDLength: senderUID.utf8.count,
                                                recipientUIDLength: recipientUIDLength, version: version) else {
            throw BenchFailure.usage("--size \(size) does not fit in the largest envelope (1 MiB)")
        }
        envelopeBytes = envelope
    }

    /// The size class of a message with a `body`-byte body. Version 1's record is 104 fixed bytes
    /// + the uids + the id + the body (spec/envelope.md §2.3); version 2's is 153 + the same while
    /// it carries the ratchet start (44 of them), as every bench message does, since recipients
    /// never answer: 36 of names' lengths, version and sender key, 57 of ratchet id, kind and
    /// start, 40 of ratchet header, 4 of length and 16 of AEAD tag.
    static func envelopeBytes(body: Int, senderUIDLength: Int, recipientUIDLength: Int, version: EnvelopeVersion) -> Int? {
        Envelope.sizeClass(forRecordLength: (version == .v1 ? 104 : 153) + senderUIDLength + recipientUIDLength + BenchID.length + body)
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
