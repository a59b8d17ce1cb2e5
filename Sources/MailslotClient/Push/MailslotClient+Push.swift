import Foundation
import MailslotWire

// Wake-ups (spec/push.md, docs/design/wakeups.md §7.1). The relay wakes a registered device when
// a message waits for it and no subscription to its mailbox is open anywhere; the wake-up carries
// only the account's tag. Registrations end with the sign-in that wrote them (sign-out, a reused
// refresh token, a session family that expired), so the client keeps every target it registered
// and registers it again after each sign-in: the same id, the same body — one idempotent `PUT`.
extension MailslotClient {
    /// What the relay does with wake-ups: its providers, its VAPID key (for Web Push
    /// subscriptions), the interval between two wake-ups of one registration.
    ///
    /// - Throws: ``ClientError/relay(problem:)``, ``ClientError/unreachable(reason:)``.
    public func pushConfiguration() async throws -> PushConfiguration {
        PushConfiguration(try await authorized { try await api.pushService(session: $0) })
    }

    /// Registers this device's `target` with the relay, or replaces the registration `id` names,
    /// and keeps it so that every later sign-in registers it again.
    ///
    /// Without `id`, the target replaces the one of the same provider this client registered
    /// before (a new APNs token replaces the old one), or gets a new random id. Registering the
    /// same target again is harmless: the relay answers the same registration.
    ///
    /// ```swift
    /// // iOS, in didRegisterForRemoteNotificationsWithDeviceToken:
    /// try await client.registerPush(.apns(deviceToken: Array(deviceToken)))
    /// // When a wake-up arrives, its payload holds `try await client.pushTag`: open the
    /// // subscription, drain, acknowledge, close.
    /// ```
    ///
    /// - Parameters:
    ///   - target: What the platform gave the app (``DevicePushTarget``).
    ///   - id: The registration's id (16 to 64 of `A-Z a-z 0-9 _ -`), to keep several targets of
    ///     one provider.
    ///   - tag: What the wake-ups carry instead of ``pushTag`` (0 to 48 of `A-Z a-z 0-9 _ -`).
    /// - Returns: The registration as the relay stored it.
    /// - Throws: ``ClientError/invalidPushTarget(reason:)`` for a target, id or tag that is
    ///   wrong on its face (nothing asked); ``ClientError/pushProviderDisabled(provider:)`` when
    ///   the relay does not send wake-ups through that provider; ``ClientError/relay(problem:)``
    ///   for another refusal (`invalid_push_registration`, `push_endpoint_refused`,
    ///   `too_many_registrations`) — nothing is kept then. When the relay cannot be reached or
    ///   asks to wait (``ClientError/unreachable(reason:)``, a 429 or 5xx), the target is kept
    ///   and registered at the next sign-in, and the error is thrown all the same; so it is when
    ///   the relay answers another registration than the one asked for (another id, provider or
    ///   tag: ``ClientError/invalidResponse(detail:)``).
    @discardableResult
    public func registerPush(_ target: DevicePushTarget, id: String? = nil, tag: String? = nil) async throws -> PushRegistration {
        if let id, !PushGrammar.isValidRegistrationID(id) {
            throw ClientError.invalidPushTarget(reason: "a registration id is 16 to 64 of A-Z a-z 0-9 _ -")
        }
        if let tag, !PushGrammar.isValidTag(tag) {
            throw ClientError.invalidPushTarget(reason: "a tag is 0 to 48 of A-Z a-z 0-9 _ -")
        }
        let stored = try target.request(tag: nil)
        let me = try await identity()
        var wakeTag = tag
        if wakeTag == nil { wakeTag = try await store.pushTag() }
        let request = stored.tagged(wakeTag ?? "")
        var registrationID = id
        if registrationID == nil { registrationID = try await store.pushTargetID(of: target.provider) }
        let chosen = registrationID ?? Base64URL.encode(randomBytes(16))
        let record = ClientStore.StoredPushTarget(id: chosen, provider: target.provider,
                                                  target: String(decoding: try JSONEncoder().encode(stored), as: UTF8.self), tag: tag)
        do {
            let registration = try await authorized { try await api.putPush(request, id: chosen, owner: me.uid, session: $0) }
            // The answer is the registration the relay stored for this request: another id,
            // provider or tag means the relay did not store what was asked (or lies about it).
            // The target is kept all the same (below), so that the next sign-in registers it.
            guard registration.id == chosen, registration.provider == target.provider, registration.tag == request.tag ?? "" else {
                throw ClientError.invalidResponse(detail: "the relay answered registration \(registration.id) (\(registration.provider.rawValue)) for \(chosen)")
            }
            try await store.savePushTarget(record)
            return registration
        } catch ClientError.relay(let problem) where problem.code == .pushProviderDisabled {
            throw ClientError.pushProviderDisabled(provider: target.provider)
        } catch ClientError.relay(let problem) where (400..<500).contains(problem.code.status) && problem.code.status != 429 {
            throw ClientError.relay(problem: problem)  // refused for good: not kept
        } catch {
            // Not refused, only not done: the next sign-in registers it.
            try await store.savePushTarget(record)
            throw error
        }
    }

    /// This account's registrations on the relay — those of every device it signed in on — as
    /// the relay lists them, ordered by id. A registration the push service called dead (the app
    /// was uninstalled, the subscription ended) is no longer listed.
    /// - Throws: ``ClientError/relay(problem:)``, ``ClientError/unreachable(reason:)``;
    ///   ``ClientError/invalidResponse(detail:)`` for a list that names one id twice.
    public func pushRegistrations() async throws -> [PushRegistration] {
        let me = try await identity()
        let registrations = try await authorized { try await api.pushRegistrations(owner: me.uid, session: $0) }
        // One row per id (the relay's key): a list that repeats one cannot be shown as it is.
        var seen = Set<String>()
        if let repeated = registrations.first(where: { !seen.insert($0.id).inserted }) {
            throw ClientError.invalidResponse(detail: "the relay listed push registration \(repeated.id) twice")
        }
        return registrations.sorted { $0.id < $1.id }
    }

    /// Removes registration `id` from the relay and forgets it here: the device is no longer
    /// woken through it, and sign-ins no longer register it. Removing one the relay does not
    /// have (removed already, dead, another sign-in's that ended) is not an error.
    /// - Throws: ``ClientError/invalidPushTarget(reason:)`` for an id outside the grammar;
    ///   ``ClientError/relay(problem:)``, ``ClientError/unreachable(reason:)`` — the target is
    ///   then still kept, so that a retry removes it.
    public func removePush(id: String) async throws {
        guard PushGrammar.isValidRegistrationID(id) else {
            throw ClientError.invalidPushTarget(reason: "a registration id is 16 to 64 of A-Z a-z 0-9 _ -")
        }
        let me = try await identity()
        do {
            try await authorized { try await api.deletePush(id: id, owner: me.uid, session: $0) }
        } catch ClientError.relay(let problem) where problem.code == .notFound {
            // Gone already: what was asked for holds.
        }
        try await store.deletePushTarget(id)
    }

    /// The tag the relay puts in this account's wake-ups: random (22 characters), made once per
    /// client store and the same from then on, so that an app with several accounts maps a
    /// wake-up to the account it is for. It tells a push service nothing about the account.
    public var pushTag: String {
        get async throws { try await store.pushTag() }
    }

    /// Registers every kept target again with a new sign-in's session. Best effort, like the
    /// prekey top-up: a sign-in must not fail because a push service was dropped by the operator
    /// (the target is kept, in case it comes back) or the relay is busy (the next sign-in tries).
    /// Nothing of a target is logged but its id and provider.
    func registerKeptPushTargets(owner: String, session: String) async {
        let targets: [ClientStore.StoredPushTarget], accountTag: String
        do {
            targets = try await store.pushTargets()
            guard !targets.isEmpty else { return }
            accountTag = try await store.pushTag()
        } catch {
            logger.info("could not read the kept push targets", metadata: ["error": "\(Self.describe(error))"])
            return
        }
        for target in targets {
            do {
                let request = try JSONDecoder().decode(PushRegistrationRequest.self, from: Data(target.target.utf8))
                _ = try await api.putPush(request.tagged(target.tag ?? accountTag), id: target.id, owner: owner, session: session)
            } catch {
                logger.info("push target not registered again", metadata: ["id": "\(target.id)", "provider": "\(target.provider.rawValue)",
                                                                          "error": "\(Self.describe(error))"])
            }
        }
    }
}
