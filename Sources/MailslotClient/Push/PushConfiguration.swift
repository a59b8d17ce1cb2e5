import Foundation
import MailslotWire

/// What a relay does with wake-ups (`GET /v1/push`, spec/push.md §2.4): the services it sends
/// them through, the key Web Push subscriptions must be made with, and how often at most one
/// registration is woken.
public struct PushConfiguration: Sendable, Equatable {
    /// The push services this relay sends wake-ups through; empty when wake-ups are off. A
    /// registration for another one is refused (``ClientError/pushProviderDisabled(provider:)``).
    public let providers: Set<PushProviderKind>
    /// The relay's VAPID public key (the 65-byte uncompressed P-256 point) when Web Push is on:
    /// pass it as `applicationServerKey` to `PushManager.subscribe`, or to a UnifiedPush
    /// distributor. A subscription is bound to it: when it changes, subscribe again.
    public let vapidPublicKey: [UInt8]?
    /// At most one wake-up per registration per this interval while messages keep arriving.
    public let wakeInterval: Duration
    /// The most registrations one account may hold on this relay (all its devices together).
    public let maxRegistrations: Int

    /// The configuration a relay answered.
    init(_ info: PushServiceInfo) {
        providers = Set(info.providers)
        vapidPublicKey = info.vapidPublicKey.flatMap { Base64URL.decode($0) }
        wakeInterval = .seconds(info.wakeIntervalSeconds)
        maxRegistrations = info.maxRegistrations
    }
}
