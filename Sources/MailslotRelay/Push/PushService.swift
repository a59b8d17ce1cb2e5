import Foundation
import MailslotWire

/// Push registrations (spec/push.md §2, spec/protocol.md §4.22–§4.24): the one entry point of
/// `HTTP/PushRoutes.swift`. Every check runs here, in the order of spec/protocol.md §9, and each
/// route asks the ``AccessRules`` before it reads or writes: a non-owner learns nothing (403
/// whether the registration exists or not).
struct PushService: Sendable {
    let store: any PushRecords
    let settings: PushSettings
    let rules: AccessRules
    /// The VAPID public key (unpadded base64url of the 65-byte point) when Web Push is on: what
    /// `GET /v1/push` gives browsers as `applicationServerKey`.
    let vapidPublicKey: String?
    /// Counts the registrations created (design §5).
    let metrics: PushMetrics

    typealias Principal = SessionService.Principal

    /// The address rules registrations are checked with.
    var addressPolicy: AddressPolicy { AddressPolicy(allowPrivateAddresses: settings.allowPrivateAddresses) }

    /// `PUT /v1/users/{uid}/push/{id}`: creates or replaces the registration `id` of `owner` from
    /// `body` (strict JSON of at most 4 096 bytes, already checked by the route), noting the
    /// caller's sign-in family so that signing out removes it. True when it was created (201),
    /// false when it replaced one (200).
    ///
    /// Order: `{uid}` → `{id}` → rule → `provider` known → provider enabled → members → endpoint
    /// checks → store (replace, else the count: 409).
    func put(_ principal: Principal, owner: String, id: String, body: Data, now: Int64) async throws -> (PushRegistration, created: Bool) {
        try SendValidation.check(uid: owner)
        try Self.check(id: id)
        try require(.create, principal, owner: owner)
        let request: PushRegistrationRequest
        do { request = try JSONDecoder().decode(PushRegistrationRequest.self, from: body) } catch let error as PushRegistrationShapeError {
            if let provider = error.provider { try requireEnabled(provider) }
            throw Problem(.invalidPushRegistration, error.description)
        } catch {
            throw Problem(.invalidPushRegistration, "the body is not a JSON object")
        }
        try requireEnabled(request.provider)
        let target: PushTarget, tag: String
        do { (target, tag) = try PushTarget.validated(request, policy: addressPolicy) } catch let error as PushTarget.InvalidMember {
            throw Problem(.invalidPushRegistration, "\(error.member): \(error.reason)")
        } catch AddressPolicy.Refusal.refused(let reason) {
            throw Problem(.pushEndpointRefused, reason)
        }
        let registration = NewPushRegistration(uid: owner, id: id, provider: target.provider, target: target.canonicalJSON,
                                               route: target.route, tag: tag)
        switch try await store.putRegistration(registration, family: principal.family, max: settings.maxRegistrations, now: now) {
        case .created(let row):
            metrics.registrationCreated(row.provider)
            return (try Self.answer(row), true)
        case .replaced(let row): return (try Self.answer(row), false)
        case .tooMany:
            throw Problem(.tooManyRegistrations, "at most \(settings.maxRegistrations) push registrations per user")
        }
    }

    /// `GET /v1/users/{uid}/push`: the owner's registrations, ordered by id.
    func list(_ principal: Principal, owner: String) async throws -> PushRegistrationList {
        try SendValidation.check(uid: owner)
        try require(.read, principal, owner: owner)
        return PushRegistrationList(registrations: try await store.registrations(uid: owner).map(Self.answer))
    }

    /// `GET /v1/users/{uid}/push/{id}`: one registration, or `404 not_found`.
    func registration(_ principal: Principal, owner: String, id: String) async throws -> PushRegistration {
        try SendValidation.check(uid: owner)
        try Self.check(id: id)
        try require(.read, principal, owner: owner)
        guard let row = try await store.registration(uid: owner, id: id) else { throw Problem(.notFound, "no such push registration") }
        return try Self.answer(row)
    }

    /// `DELETE /v1/users/{uid}/push/{id}`: removes a registration and its pending wake-up, or
    /// `404 not_found`.
    func delete(_ principal: Principal, owner: String, id: String) async throws {
        try SendValidation.check(uid: owner)
        try Self.check(id: id)
        try require(.delete, principal, owner: owner)
        guard try await store.deleteRegistration(uid: owner, id: id) else { throw Problem(.notFound, "no such push registration") }
    }

    /// `GET /v1/push`: the providers this relay wakes through, its limits and its VAPID key.
    func info(_ principal: Principal) throws -> PushServiceInfo {
        guard rules.allows(.read, .pushService, principal: principal.uid) else { throw Problem(.forbidden, "you may not do this") }
        let providers = settings.enabledProviders
        return PushServiceInfo(maxRegistrations: settings.maxRegistrations, providers: providers,
                               vapidPublicKey: providers.contains(.webpush) ? vapidPublicKey : nil,
                               wakeIntervalSeconds: settings.wakeInterval)
    }

    static func check(id: String) throws {
        guard PushGrammar.isValidRegistrationID(id) else {
            throw Problem(.invalidRegistrationID, "a registration id is 16 to 64 of A-Z a-z 0-9 _ -")
        }
    }

    private func require(_ operation: AccessOperation, _ principal: Principal, owner: String) throws {
        guard rules.allows(operation, .pushRegistration, principal: principal.uid, owner: owner) else {
            throw Problem(.forbidden, "you may not do this")
        }
    }

    private func requireEnabled(_ provider: PushProviderKind) throws {
        guard settings.isEnabled(provider) else {
            throw Problem(.pushProviderDisabled, "this relay does not send \(Self.name(of: provider)) wake-ups")
        }
    }

    /// The provider's name for people.
    static func name(of provider: PushProviderKind) -> String {
        switch provider {
        case .webpush: "Web Push"
        case .apns: "APNs"
        case .fcm: "FCM"
        case .webhook: "webhook"
        }
    }

    /// A stored row as its owner sees it.
    static func answer(_ row: PushRegistrationRow) throws -> PushRegistration {
        let target = try PushTarget(provider: row.provider, storedJSON: row.target)
        return target.registration(id: row.id, tag: row.tag, createdAt: row.createdAt, updatedAt: row.updatedAt, wokenAt: row.wokenAt)
    }
}
