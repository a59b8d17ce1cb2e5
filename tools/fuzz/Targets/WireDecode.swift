// Fuzz target `wire-decode`: WireDecoding.decode(_:from:maxDepth:) (Sources/MailslotWire/
// WireDecoding.swift), the relay's one decoding path for request bodies and WebSocket frames,
// with the relay's default depth limit, followed by what the relay (or, for deliveries, the
// client) then does with the fields. The first byte picks the type; the rest is the JSON text:
//
//   0  ClientFrame (subscription socket): the members its type requires; for a send the ref, then the relay's
//      SendValidation (uid, message id, ttl, envelope base64url and size class, key id), then
//      opening the envelope as its recipient would.
//   1  SignInRequest (POST /v1/sessions): the token through TokenVerifier.
//   2  RefreshRequest (POST /v1/sessions/refresh): the refresh token's shape and hash.
//   3  SendRequest (PUT /v1/users/bob/messages/{id}): as a ClientFrame send.
//   4  MessagePatch (PATCH …/messages/{id}), and the prekey requests and answers (PrekeyUpload,
//      PrekeyClaimRequest, PrekeyCount, PrekeyClaim, spec/protocol.md §4.14): decoding only (the
//      lease checks are two comparisons; an upload's keys are checked as a Prekey's publicKey).
//   5  a key bundle (PUT /v1/users/bob/keys): KeyBundle.decode for `bob`.
//   6  RelayFrame (what a client decodes from the relay).
//   7  a chat-message body: ChatMessage.decode.
//
// Every value that decodes must encode and decode back to an equal value, and a ClientFrame must
// decode to what JSONDecoder makes of the same text (the relay reads flat frames directly).
//
// The create's checks are MailslotWire's SendValidation, the relay's own. SessionService.hash
// lives in MailslotRelay (not built here, as it needs the server dependencies) and is restated
// below; keep it in step.

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func wireDecodeOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let body = Data(input.dropFirst())
    switch mode % 8 {
    case 0:
        // The relay checks and reads flat frames in one pass, without JSONDecoder: that pass must
        // accept nothing the strict check refuses, and read exactly what JSONDecoder reads.
        let valid = (try? WireDecoding.validate(body, maxDepth: Fixed.relayMaxJSONDepth)) != nil
        if input.dropFirst().withUnsafeBufferPointer({ StrictJSON.flatStringObject($0) }) != nil {
            expect(valid, "the one-pass flat reading accepted text the strict check refuses")
        }
        if valid {
            let direct = try? WireDecoding.decode(ClientFrame.self, from: body, maxDepth: Fixed.relayMaxJSONDepth)
            expect(direct == (try? JSONDecoder().decode(ClientFrame.self, from: body)), "a frame decodes differently than with JSONDecoder")
        }
        // An ack only names an id, checked by the grammar alone; a send goes through the full path.
        guard case .send(let send) = decodeAndRoundTrip(ClientFrame.self, body), let ref = send.ref, !ref.isEmpty,
              ref.utf8.count <= 64 else { return 0 }
        relaySend(to: send.to, id: send.id, envelope: send.envelope, ttlSeconds: send.ttlSeconds, keyID: send.keyID)
    case 1:
        guard let request = decodeAndRoundTrip(SignInRequest.self, body) else { return 0 }
        _ = try? Fixed.verifier.verify(request.token, now: Fixed.now)
    case 2:
        guard let request = decodeAndRoundTrip(RefreshRequest.self, body) else { return 0 }
        _ = refreshHash(request.refresh)
    case 3:
        guard let request = decodeAndRoundTrip(SendRequest.self, body) else { return 0 }
        relaySend(to: Fixed.recipient, id: Fixed.messageID, envelope: request.envelope, ttlSeconds: request.ttlSeconds, keyID: request.keyID)
    case 4:
        _ = decodeAndRoundTrip(MessagePatch.self, body)
        _ = decodeAndRoundTrip(PrekeyClaimRequest.self, body)
        _ = decodeAndRoundTrip(PrekeyCount.self, body)
        for prekey in decodeAndRoundTrip(PrekeyUpload.self, body)?.prekeys ?? [] {
            // What the relay accepts is a canonical encoding of 32 bytes.
            if let key = prekey.publicKey { expect(Base64URL.encode(key.bytes) == prekey.key, "a non-canonical prekey decoded") }
        }
        if let prekey = decodeAndRoundTrip(PrekeyClaim.self, body)?.prekey, let key = prekey.publicKey {
            _ = key.isUsable
        }
    case 5:
        guard let bundle = try? KeyBundle.decode(Array(body), for: Fixed.recipient) else { return 0 }
        let again = Result { () throws(KeyBundleError) in try KeyBundle.decode(bundle.encoded(), for: Fixed.recipient) }
        expect(again == .success(bundle), "a key bundle changed (or was refused) after re-encoding")
    case 6:
        guard let frame = decodeAndRoundTrip(RelayFrame.self, body) else { return 0 }
        if let envelope = frame.message?.envelope.flatMap(Base64URL.decode), let id = frame.message?.id {
            _ = try? Envelope.open(envelope, id: id, recipient: Fixed.recipient, keys: Fixed.recipientKeys)
        }
    default:
        guard let message = try? ChatMessage.decode(Array(body)) else { return 0 }
        let again = Result { () throws(EnvelopeError) in try ChatMessage.decode(try message.encoded()) }
        expect(again == .success(message), "a chat message changed (or was refused) after re-encoding")
    }
    return 0
}

/// Decodes `body` as the relay does; a value that decodes must survive encoding and decoding.
private func decodeAndRoundTrip<T: Codable & Equatable>(_ type: T.Type, _ body: Data) -> T? {
    guard let value = try? WireDecoding.decode(type, from: body, maxDepth: Fixed.relayMaxJSONDepth) else { return nil }
    let encoded: Data
    do { encoded = try JSONEncoder().encode(value) } catch {
        expect(false, "a decoded \(type) does not encode: \(error)")
        return nil
    }
    let again = Result { () throws(WireDecodingError) in try WireDecoding.decode(type, from: encoded, maxDepth: Fixed.relayMaxJSONDepth) }
    expect(again == .success(value), "a \(type) changed (or was refused) after re-encoding")
    return value
}

/// The relay's checks of a create's fields (SendValidation, default limits); an envelope that
/// passes is then opened as the recipient's client would.
private func relaySend(to recipient: String, id: String, envelope base64: String, ttlSeconds: Int64?, keyID: String?) {
    guard let checked = try? SendValidation().check(to: recipient, id: id, envelope: base64, ttlSeconds: ttlSeconds, keyID: keyID) else {
        return
    }
    // The relay checks the text without decoding it (it stores and forwards the text).
    let envelope = Base64URL.decode(base64) ?? []
    expect(envelope.count == checked.size && Base64URL.encode(envelope) == base64, "the relay accepted a non-canonical envelope encoding")
    if let keyID { expect(Base64URL.decode(keyID)?.count == 16, "the relay accepted a key id that is not 16 bytes") }
    _ = try? Envelope.open(envelope, id: id, recipient: recipient, keys: Fixed.recipientKeys)
}

/// SessionService.hash for a refresh token: `msr_` and 43 characters of base64url for 32 bytes.
private func refreshHash(_ secret: String) -> [UInt8]? {
    let prefix = "msr_"
    guard secret.hasPrefix(prefix), secret.utf8.count == prefix.utf8.count + 43,
          Base64URL.decode(secret.dropFirst(prefix.count))?.count == 32 else { return nil }
    return blake2b(Array(secret.utf8), length: 32)
}

/// Requests and frames of every type built from the spec's vectors, and a few hand-made ones.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    func add(_ name: String, _ mode: UInt8, _ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) { seeds.append((name, Seeds.mode(mode, data))) }
    }
    func add(_ name: String, _ mode: UInt8, text: String) { seeds.append((name, Seeds.mode(mode, text.utf8))) }

    let envelopes = Seeds.list(Seeds.json(root, "spec/vectors/envelopes.json"), "cases")
    for (index, vector) in envelopes.prefix(8).enumerated() {
        guard let text = vector["envelope"] as? String, let envelope = Base64URL.decode(text) else { continue }
        add("frame-send-\(index)", 0, ClientFrame.send(ref: "r\(index)", to: Fixed.recipient, id: Fixed.messageID, envelope: envelope,
                                                        ttlSeconds: index % 2 == 0 ? nil : 60))
        add("send-\(index)", 3, SendRequest(envelope: envelope, ttlSeconds: index % 2 == 0 ? nil : 2_592_000,
                                             keyID: index % 2 == 0 ? Base64URL.encode([UInt8](repeating: UInt8(index), count: 16)) : nil))
        let record = MessageRecord(id: Fixed.messageID, author: "alice", createdAt: "2027-01-15T08:00:00+00:00",
                                   expiresAt: "2027-01-22T08:00:00+00:00", size: envelope.count, seq: Int64(index + 1),
                                   leaseUntil: nil, leaseHolder: nil, envelope: text)
        add("relay-message-\(index)", 6, RelayFrame.message(record))
    }
    for (index, vector) in envelopes.enumerated() {
        if let body = vector["body"] as? String { add("body-\(index)", 7, text: body) }
    }
    add("frame-ack", 0, ClientFrame.ack(Fixed.messageID))
    add("frame-unknown", 0, text: #"{"type":"ping","id":null,"extra":[1,{"a":"\u00e9"}]}"#)

    let tokens = Seeds.json(root, "spec/vectors/tokens.json")
    for (index, vector) in (Seeds.list(tokens, "mint") + Seeds.list(tokens, "verify").prefix(6)).enumerated() {
        if let token = vector["token"] as? String { add("sign-in-\(index)", 1, SignInRequest(token: token)) }
    }
    add("refresh", 2, RefreshRequest(refresh: "msr_" + Base64URL.encode([UInt8](repeating: 7, count: 32))))
    add("refresh-bad", 2, text: #"{"refresh":"msr_AAAA","x":1}"#)
    add("patch-take", 4, MessagePatch(leaseSeconds: 300, leaseHolder: "worker-1"))
    add("patch-release", 4, text: #"{"lease_seconds":0}"#)
    let prekey = Prekey(id: 1, key: Fixed.recipientKeys.publicKey)
    add("prekey-upload", 4, PrekeyUpload(prekeys: [prekey, Prekey(id: 4_294_967_295, keyText: Base64URL.encode([UInt8](repeating: 0, count: 32)))]))
    add("prekey-claim", 4, PrekeyClaim(prekey: prekey))
    add("prekey-claim-none", 4, PrekeyClaim(prekey: nil))

    for (index, vector) in Seeds.list(Seeds.json(root, "spec/vectors/bundles.json"), "cases").enumerated() {
        if let bundle = vector["bundle"] as? String { add("bundle-\(index)", 5, text: bundle) }
    }
    add("relay-ready", 6, RelayFrame.ready(pending: 3))
    add("relay-ready-prekeys", 6, RelayFrame.ready(pending: 3, prekeys: 57))
    add("relay-sent", 6, text: #"{"type":"sent","ref":"r","created":true,"message":{"id":"01KF0000000000000000000000","author":"alice","created_at":"x","expires_at":"y","size":512,"seq":null}}"#)
    add("relay-error", 6, RelayFrame.error(Problem(.rateLimited, "slow down", retryAfter: 2), ref: "r"))
    add("relay-acked", 6, RelayFrame.acked(id: Fixed.messageID))
    return seeds
}
