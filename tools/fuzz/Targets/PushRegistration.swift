// Fuzz target `push-registration`: the body of `PUT /v1/users/{uid}/push/{id}` (spec/push.md §2.1)
// as the relay reads it — WireDecoding.validate with the relay's depth limit, then
// PushRegistrationRequest's strict decoding (Sources/MailslotWire/Push.swift) — followed by the
// grammar checks the relay runs on the members (PushGrammar). The input is the JSON text.
//
// Every body that decodes must hold only its provider's members (and `provider`), the required
// ones among them, must encode and decode back to an equal value, and a refusal must be a
// PushRegistrationShapeError naming a member (or the depth/syntax refusal before it). The address
// checks of the endpoint (AddressPolicy) and the P-256 curve check live in MailslotRelay, which is
// not built here; AddressPolicyTests and PushServiceTests cover them.

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func pushRegistrationOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let body = Data(bytes(data, size))
    guard (try? WireDecoding.validate(body, maxDepth: Fixed.relayMaxJSONDepth)) != nil else { return 0 }
    let request: PushRegistrationRequest
    do { request = try JSONDecoder().decode(PushRegistrationRequest.self, from: body) } catch let error as PushRegistrationShapeError {
        expect(!error.member.isEmpty && !error.reason.isEmpty, "a refusal that names no member")
        return 0
    } catch {
        return 0  // not an object: the relay answers invalid_push_registration too
    }
    let (required, optional) = PushRegistrationRequest.members(of: request.provider)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let encoded = try? encoder.encode(request),
          let members = (try? JSONSerialization.jsonObject(with: encoded)) as? [String: Any] else {
        expect(false, "a decoded request does not encode")
        return 0
    }
    let names = Set(members.keys).subtracting(["provider"])
    expect(names.isSubset(of: required.union(optional)), "a \(request.provider) request decoded with members \(names.sorted())")
    expect(required.isSubset(of: names), "a \(request.provider) request decoded without \(required.subtracting(names).sorted())")
    expect((try? JSONDecoder().decode(PushRegistrationRequest.self, from: encoded)) == request, "a request does not round-trip")
    // The relay's value checks: total functions of any text.
    _ = request.tag.map(PushGrammar.isValidTag)
    if let token = request.token {
        _ = (PushGrammar.isValidAPNsToken(token), PushGrammar.isValidFCMToken(token), PushGrammar.isValidWebhookToken(token))
    }
    _ = (request.p256dh.flatMap { Base64URL.decode($0) }, request.auth.flatMap { Base64URL.decode($0) })
    return 0
}

/// The bodies of spec/protocol.md §4.22 and spec/push.md §2.1, and near misses.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    let texts: [(String, String)] = [
        ("webpush", #"{"auth":"BTBZMqHH6r4Tts7J_aSIgg","endpoint":"https://push.example.net/up/8f3Kq","p256dh":"\#(p256dh)","provider":"webpush","tag":"k3J9vQ0aZx"}"#),
        ("webpush-private", #"{"auth":"BTBZMqHH6r4Tts7J_aSIgg","endpoint":"https://10.0.0.7/x","p256dh":"\#(p256dh)","provider":"webpush"}"#),
        ("apns", #"{"mode":"background","provider":"apns","sandbox":true,"tag":"","token":"\#(String(repeating: "ab", count: 32))"}"#),
        ("apns-mode", #"{"mode":"loud","provider":"apns","token":"00"}"#),
        ("fcm", #"{"provider":"fcm","tag":"t","token":"abc:DEF_ghi-jkl.mno"}"#),
        ("webhook", #"{"provider":"webhook"}"#),
        ("webhook-token", #"{"provider":"webhook","token":"device 42 ~"}"#),
        ("stray", #"{"provider":"fcm","token":"t","endpoint":"https://x.example/"}"#),
        ("unknown", #"{"provider":"mqtt","token":"t"}"#),
        ("types", #"{"provider":"apns","token":7,"sandbox":"yes"}"#),
    ]
    return texts.map { ($0.0, Array($0.1.utf8)) }
}
