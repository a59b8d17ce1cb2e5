import Foundation
import MailslotWire

// The relay's push registration routes (spec/protocol.md §4.22–§4.24, spec/push.md §2).
extension RelayAPI {
    /// Registers (or replaces) `owner`'s registration `id` with `request`: `201` when new, `200`
    /// when replaced; the relay's record either way.
    func putPush(_ request: PushRegistrationRequest, id: String, owner: String, session: String) async throws -> PushRegistration {
        try decode(PushRegistration.self, try await call("PUT", "/v1/users/\(owner)/push/\(id)", session: session,
                                                         body: JSONEncoder().encode(request)))
    }

    /// All of `owner`'s registrations, ordered by id.
    func pushRegistrations(owner: String, session: String) async throws -> [PushRegistration] {
        try decode(PushRegistrationList.self, try await call("GET", "/v1/users/\(owner)/push", session: session)).registrations
    }

    /// Removes `owner`'s registration `id`; `404 not_found` when there is none.
    func deletePush(id: String, owner: String, session: String) async throws {
        _ = try await call("DELETE", "/v1/users/\(owner)/push/\(id)", session: session)
    }

    /// What the relay does with wake-ups.
    func pushService(session: String) async throws -> PushServiceInfo {
        try decode(PushServiceInfo.self, try await call("GET", "/v1/push", session: session))
    }
}
