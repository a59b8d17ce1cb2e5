// Fuzz target `relay-answer`: RelayAnswers.decode(_:from:) and RelayAnswers.frame(_:)
// (Sources/MailslotWire/RelayAnswers.swift), the client library's one decoding path for what a
// relay sends it — HTTP answers and subscription frames — followed by what the client then does
// with the numbers. A relay is an adversary here: nothing it sends may crash the client, and every
// number that decodes must be within the range spec/protocol.md gives it. The first byte picks
// the type; the rest is the JSON text:
//
//   0  PrekeyCount (`GET`/`POST /v1/users/{uid}/prekeys`): 0 … 2³²−1; the client's top-up
//      arithmetic (supply − count) must not trap.
//   1  PrekeyClaim: a prekey id of 1 … 2³²−1, or none.
//   2  MessagePage: at most Defaults.maxPageSize records, `next` a cursor after a non-empty page.
//   3  MessageRecord: id and author grammar, RFC 3339 times, a size class, seq ≥ 1.
//   4  Problem: an HTTP status, retry_after 0 … 2³¹−1, then the ack retry's wait arithmetic.
//   5  SessionGrant: uid grammar, session and refresh tokens of the relay's shape, times.
//   6  RelayFrame (the text of a WebSocket frame): ready's pending ≥ 0 and prekeys in range,
//      ids of acked and error frames, records of message and sent frames.
//
// Every value that decodes must encode and decode back to an equal value, and must also be what
// plain JSONDecoder makes of the text (the range checks only refuse; they never change a value).

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func relayAnswerOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let body = Data(input.dropFirst())
    switch mode % 7 {
    case 0:
        guard let answer = decodeAndRoundTrip(PrekeyCount.self, body) else { return 0 }
        checkPrekeyCount(answer.count)
    case 1:
        guard let claim = decodeAndRoundTrip(PrekeyClaim.self, body), let prekey = claim.prekey else { return 0 }
        expect(prekey.id >= 1, "a claimed prekey with id 0 decoded")
        _ = prekey.publicKey?.isUsable
    case 2:
        guard let page = decodeAndRoundTrip(MessagePage.self, body) else { return 0 }
        expect(page.messages.count <= Defaults.maxPageSize, "a page of \(page.messages.count) messages decoded")
        if let next = page.next {
            expect(!page.messages.isEmpty, "a next cursor after an empty page decoded")
            expect(Int64(next).map { $0 >= 0 && String($0) == next } == true, "a cursor that is not canonical decimal decoded: \(next)")
        }
        page.messages.forEach(checkRecord)
    case 3:
        guard let record = decodeAndRoundTrip(MessageRecord.self, body) else { return 0 }
        checkRecord(record)
    case 4:
        guard let problem = decodeAndRoundTrip(Problem.self, body) else { return 0 }
        checkProblem(problem)
    case 5:
        guard let grant = decodeAndRoundTrip(SessionGrant.self, body) else { return 0 }
        expect(Identifier.isValidUID(grant.uid), "a grant for a uid outside the grammar decoded")
        for (secret, prefix) in [(grant.session, "mss_"), (grant.refresh, "msr_")] {
            expect(secret.hasPrefix(prefix) && secret.utf8.count == 47 && secret.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F },
                   "a token that could not go into a header decoded")
        }
        expect(Timestamp.parse(grant.expiresAt) != nil && Timestamp.parse(grant.refreshExpiresAt) != nil, "a grant's time does not parse")
    default:
        // The client receives text frames: valid UTF-8, as the WebSocket layer guarantees.
        let text = String(decoding: body, as: UTF8.self)
        guard let frame = try? RelayAnswers.frame(text) else { return 0 }
        expect((try? JSONDecoder().decode(RelayFrame.self, from: Data(text.utf8))) == frame, "a frame decodes differently than with JSONDecoder")
        roundTrip(frame)
        switch frame {
        case .ready(let pending, let prekeys):
            expect(pending >= 0, "a ready frame with \(pending) pending decoded")
            if let prekeys { checkPrekeyCount(prekeys) }
        case .prekeys(let count):
            checkPrekeyCount(count)
        case .message(let record), .sent(_, _, let record):
            checkRecord(record)
        case .sentMany(_, let results):
            for result in results {
                switch result.outcome {
                case .stored(_, let record): checkRecord(record)
                case .refused(let problem): checkProblem(problem)
                }
            }
        case .acked(let id):
            expect(Identifier.isValidMessageID(id), "an acked frame for an id outside the grammar decoded")
        case .error(let problem, _, let id):
            checkProblem(problem)
            if let id { expect(Identifier.isValidMessageID(id), "an error frame for an id outside the grammar decoded") }
        case .unknown:
            break
        }
    }
    return 0
}

/// What the client does with a prekey count: tops up to its supply of 100 (MailslotClient's
/// `replenishPrekeys`), with trapping arithmetic, as it is written there.
private func checkPrekeyCount(_ count: Int) {
    expect((0...RelayAnswers.maxPrekeyCount).contains(count), "a prekey count of \(count) decoded")
    let supply = 100
    let toMake = count <= 0 ? supply : max(0, supply - min(count, supply))
    expect((0...supply).contains(toMake), "the top-up would make \(toMake) prekeys")
}

/// A record's members are within their grammar and range; its envelope opens (or not) as bob's.
private func checkRecord(_ record: MessageRecord) {
    expect(Identifier.isValidMessageID(record.id) && Identifier.isValidUID(record.author), "a record with a bad id or author decoded")
    expect(record.size >= Envelope.minimumSize && record.size <= Envelope.maximumSize && record.size & (record.size - 1) == 0,
           "a record of size \(record.size) decoded")
    if let seq = record.seq { expect(seq >= 1, "a record with seq \(seq) decoded") }
    if let envelope = record.envelope { expect(Base64URL.decodedCount(envelope) == record.size, "a record whose size is not its envelope's decoded") }
    expect(Timestamp.parse(record.createdAt) != nil && Timestamp.parse(record.expiresAt) != nil, "a record's time does not parse")
    if let envelope = record.envelope.flatMap(Base64URL.decode) {
        _ = try? Envelope.open(envelope, id: record.id, recipient: Fixed.recipient, keys: Fixed.recipientKeys)
    }
}

/// A problem's numbers are in range, and the ack retry's wait (AckRetries) computes without a trap.
private func checkProblem(_ problem: Problem) {
    expect((100...599).contains(problem.status), "a problem with status \(problem.status) decoded")
    if let retryAfter = problem.retryAfter {
        expect((0...RelayAnswers.maxRetryAfter).contains(retryAfter), "a retry_after of \(retryAfter) decoded")
    }
    let seconds = min(30, max(0.5, Double(problem.retryAfter ?? 0)))
    _ = Duration.milliseconds(Int64(seconds * 1000))
}

/// Decodes `body` as the client does; a value that decodes must be JSONDecoder's and survive
/// encoding and decoding.
private func decodeAndRoundTrip<T: Codable & Equatable>(_ type: T.Type, _ body: Data) -> T? {
    guard let value = try? RelayAnswers.decode(type, from: body) else { return nil }
    expect((try? JSONDecoder().decode(type, from: body)) == value, "a \(type) decodes differently than with JSONDecoder")
    roundTrip(value)
    return value
}

private func roundTrip<T: Codable & Equatable>(_ value: T) {
    let encoded: Data
    do { encoded = try JSONEncoder().encode(value) } catch {
        expect(false, "a decoded \(T.self) does not encode: \(error)")
        return
    }
    let again = Result { () throws(RelayAnswerError) in try RelayAnswers.decode(T.self, from: encoded) }
    expect(again == .success(value), "a \(T.self) changed (or was refused) after re-encoding")
}

/// Answers and frames as the spec shows them, built from its envelope vectors, and the lies a
/// relay could tell (counts of −2⁶³ and −5 000 000, huge sizes, ids that are paths).
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    func add(_ name: String, _ mode: UInt8, _ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) { seeds.append((name, Seeds.mode(mode, data))) }
    }
    func add(_ name: String, _ mode: UInt8, text: String, decodes: Bool) {
        let type: Any.Type = [PrekeyCount.self, PrekeyClaim.self, MessagePage.self, MessageRecord.self, Problem.self,
                              SessionGrant.self, RelayFrame.self][Int(mode)]
        // A seed says what it tests: a stale harness stops here, rather than fuzz less.
        let decoded: Bool = switch mode {
        case 0: (try? RelayAnswers.decode(PrekeyCount.self, from: Data(text.utf8))) != nil
        case 1: (try? RelayAnswers.decode(PrekeyClaim.self, from: Data(text.utf8))) != nil
        case 2: (try? RelayAnswers.decode(MessagePage.self, from: Data(text.utf8))) != nil
        case 3: (try? RelayAnswers.decode(MessageRecord.self, from: Data(text.utf8))) != nil
        case 4: (try? RelayAnswers.decode(Problem.self, from: Data(text.utf8))) != nil
        case 5: (try? RelayAnswers.decode(SessionGrant.self, from: Data(text.utf8))) != nil
        default: (try? RelayAnswers.frame(text)) != nil
        }
        expect(decoded == decodes, "seed \(name) (\(type)) \(decodes ? "is refused" : "decodes")")
        seeds.append((name, Seeds.mode(mode, text.utf8)))
    }

    let created = "2027-01-15T08:00:00.000Z", expires = "2027-01-22T08:00:00.000Z"
    var records: [MessageRecord] = []
    let envelopes = Seeds.list(Seeds.json(root, "spec/vectors/envelopes.json"), "cases")
    for (index, vector) in envelopes.prefix(6).enumerated() {
        // Vectors of refused envelopes may have any length: only size classes make a record.
        guard let text = vector["envelope"] as? String, let envelope = Base64URL.decode(text),
              envelope.count >= Envelope.minimumSize, envelope.count & (envelope.count - 1) == 0 else { continue }
        let record = MessageRecord(id: Fixed.messageID, author: "alice", createdAt: created, expiresAt: expires, size: envelope.count,
                                   seq: Int64(index + 1), envelope: text)
        records.append(record)
        add("record-\(index)", 3, record)
        add("frame-message-\(index)", 6, RelayFrame.message(record))
    }
    expect(!records.isEmpty, "no envelope vector makes a record")
    add("page", 2, MessagePage(messages: records, next: "\(records.count)"))
    add("page-last", 2, MessagePage(messages: Array(records.prefix(1)), next: nil))
    add("count", 0, PrekeyCount(count: 57))
    add("claim", 1, PrekeyClaim(prekey: Prekey(id: 1, key: Fixed.recipientKeys.publicKey)))
    add("claim-none", 1, PrekeyClaim(prekey: nil))
    add("problem", 4, Problem(.rateLimited, "slow down", retryAfter: 2))
    let secret = Base64URL.encode([UInt8](repeating: 7, count: 32))
    add("grant", 5, SessionGrant(uid: "bob", session: "mss_" + secret, refresh: "msr_" + secret, expiresAt: created, refreshExpiresAt: expires))
    add("frame-ready", 6, RelayFrame.ready(pending: 3, prekeys: 57))
    add("frame-acked", 6, RelayFrame.acked(id: Fixed.messageID))
    add("frame-error", 6, RelayFrame.error(Problem(.unavailable, retryAfter: 2), id: Fixed.messageID))
    add("frame-sent", 6, RelayFrame.sent(ref: "r1", created: true, message: MessageRecord(id: Fixed.messageID, author: "bob", createdAt: created,
                                                                                          expiresAt: expires, size: 512, seq: nil)))

    // The lies: each refused.
    add("count-min", 0, text: #"{"count":-9223372036854775808}"#, decodes: false)
    add("count-negative", 0, text: #"{"count":-5000000}"#, decodes: false)
    add("count-huge", 0, text: #"{"count":4294967296}"#, decodes: false)
    add("count-max", 0, text: #"{"count":4294967295}"#, decodes: true)
    add("claim-id-0", 1, text: #"{"prekey":{"id":0,"key":"GNZZkhNkvsEHS3R2KRNIzA7V8F-LcxrTFjWpCAmBLQM"}}"#, decodes: false)
    add("claim-id-negative", 1, text: #"{"prekey":{"id":-1,"key":"GNZZkhNkvsEHS3R2KRNIzA7V8F-LcxrTFjWpCAmBLQM"}}"#, decodes: false)
    add("page-empty-next", 2, text: #"{"messages":[],"next":"7"}"#, decodes: false)
    add("page-bad-cursor", 2, text: #"{"messages":[],"next":"../x"}"#, decodes: false)
    let record = #"{"author":"alice","created_at":"\#(created)","expires_at":"\#(expires)","id":"\#(Fixed.messageID)","seq":1,"size":512}"#
    add("record-plain", 3, text: record, decodes: true)
    add("record-size-huge", 3, text: record.replacingOccurrences(of: #""size":512"#, with: #""size":9223372036854775807"#), decodes: false)
    add("record-size-odd", 3, text: record.replacingOccurrences(of: #""size":512"#, with: #""size":513"#), decodes: false)
    add("record-seq-0", 3, text: record.replacingOccurrences(of: #""seq":1"#, with: #""seq":0"#), decodes: false)
    add("record-id-path", 3, text: record.replacingOccurrences(of: Fixed.messageID, with: "../../sessions/current"), decodes: false)
    add("problem-retry-negative", 4, text: #"{"code":"unavailable","status":503,"title":"unavailable","retry_after":-9223372036854775808}"#,
        decodes: false)
    add("frame-ready-min", 6, text: #"{"type":"ready","pending":0,"prekeys":-9223372036854775808}"#, decodes: false)
    add("frame-ready-pending", 6, text: #"{"type":"ready","pending":-1,"prekeys":10}"#, decodes: false)
    add("frame-prekeys", 6, text: #"{"type":"prekeys","prekeys":24}"#, decodes: true)
    add("frame-prekeys-min", 6, text: #"{"type":"prekeys","prekeys":-9223372036854775808}"#, decodes: false)
    add("frame-unknown", 6, text: #"{"type":"later","count":-1}"#, decodes: true)
    return seeds
}
