import ArgumentParser
import Foundation

/// How the Web Push stand-in answers the relay's wake-ups during a run (docs/design/wakeups.md
/// §9.5): the provider the message path must not notice.
enum PushFault: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// Every wake-up accepted (201), each checked and decrypted by the stand-in.
    case none
    /// No wake-up answered: the stand-in holds each request until the relay gives up on it.
    case hang
    /// Every wake-up answered 500 (the relay retries with backoff, then drops it).
    case status500 = "500"
}

/// The push stand-ins `tools/push run` started (tools/push-standins/standins.py), reached through
/// the folder it made (`MAILSLOT_TEST_PUSH_DIR`): where they listen, the relay's settings that
/// point every provider at them, and the control port (test subscriptions, scripted answers,
/// counters). The bench uses the Web Push receiver only.
struct PushStandin: Sendable {
    /// The folder (keys, CA, `ports.json`, `relay-arguments.json`).
    let folder: String
    /// `serve` arguments for all four providers at the stand-ins, `--push-allow-private-addresses`
    /// among them (the receiver listens on loopback, over plain http).
    let relayArguments: [String]
    /// The control port's routes.
    private let control: RelayHTTP

    /// How long the stand-in answers 500 once told to: longer than any run (the end of the run
    /// clears it).
    private static let faultSeconds = 24 * 3600

    /// Reads the folder; a clear usage error when it is not one `tools/push run` made (or the
    /// stand-ins have not written their files yet).
    init(folder: String) throws {
        self.folder = folder
        func read<T: Decodable>(_ name: String, as type: T.Type) throws -> T {
            let path = (folder as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else {
                throw BenchFailure.usage("--push-standin \(folder): no \(name) there (give the folder `tools/push run` made, $MAILSLOT_TEST_PUSH_DIR)")
            }
            do { return try JSONDecoder().decode(type, from: data) } catch {
                throw BenchFailure.usage("--push-standin \(folder): \(name) is not what tools/push writes: \(error)")
            }
        }
        let ports = try read("ports.json", as: [String: Int].self)
        guard let port = ports["control"], (1...65535).contains(port), ports["webpush"] != nil else {
            throw BenchFailure.usage("--push-standin \(folder): ports.json names no control or webpush port")
        }
        relayArguments = try Self.serveArguments(read("relay-arguments.json", as: [String].self))
        control = RelayHTTP(base: "http://127.0.0.1:\(port)")
    }

    /// The stand-ins' flag/value list as `serve` takes it: `--push-allow-private-addresses` is a
    /// switch on the command line (its `true` value belongs to the environment variable's form).
    static func serveArguments(_ list: [String]) throws -> [String] {
        guard list.count.isMultiple(of: 2) else { throw BenchFailure.usage("relay-arguments.json is not a list of flags and values") }
        var arguments: [String] = []
        for index in stride(from: 0, to: list.count, by: 2) {
            let flag = list[index], value = list[index + 1]
            guard flag.hasPrefix("--") else { throw BenchFailure.usage("relay-arguments.json: \(flag) is not a flag") }
            if flag == "--push-allow-private-addresses" {
                if value == "true" { arguments.append(flag) }
            } else {
                arguments += [flag, value]
            }
        }
        guard arguments.contains("--push-allow-private-addresses") else {
            // The receiver is on loopback: without the allowance the relay refuses every endpoint.
            throw BenchFailure.usage("relay-arguments.json does not allow private addresses; the stand-ins listen on loopback")
        }
        return arguments
    }

    /// A new subscription at the Web Push receiver (plain http on loopback): what a browser's
    /// `PushSubscription.toJSON()` gives, flattened.
    func subscribe() async throws -> WebPushSubscription {
        let answer = try await call("POST", "/webpush/_subscribe", ["tls": false])
        guard answer.status == 200, let subscription = try? JSONDecoder().decode(WebPushSubscription.self, from: answer.body) else {
            throw BenchFailure.failed("the Web Push stand-in refused a test subscription: HTTP \(answer.status)")
        }
        return subscription
    }

    /// Clears the receiver's scripted answers, log and counters, then sets `fault` for what follows.
    func begin(_ fault: PushFault) async throws {
        try await command(["reset": true])
        switch fault {
        case .none: break
        case .hang: try await command(["hang": true])
        case .status500: try await command(["status": 500, "for_seconds": Self.faultSeconds])
        }
    }

    /// Ends the fault: hung requests are released and every answer is 201 again (the counters stay).
    func end() async throws {
        try await command(["hang": false, "status": 201, "for_seconds": 0])
    }

    /// The receiver's counters: requests, accepted, hanging, max_hanging, in_flight, max_in_flight, …
    func state() async throws -> [String: Int] {
        let answer = try await control.call("GET", "/webpush/_state")
        guard answer.status == 200, let state = try? JSONDecoder().decode([String: Int].self, from: answer.body) else {
            throw BenchFailure.failed("the Web Push stand-in's state: HTTP \(answer.status)")
        }
        return state
    }

    private func command(_ body: [String: any Sendable]) async throws {
        let answer = try await call("POST", "/webpush/_control", body)
        guard answer.status == 200 else {
            throw BenchFailure.failed("the Web Push stand-in refused \(body): HTTP \(answer.status) \(String(decoding: answer.body, as: UTF8.self))")
        }
    }

    private func call(_ method: String, _ path: String, _ body: [String: any Sendable]) async throws -> (status: Int, body: Data) {
        let data = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
        do { return try await control.call(method, path, body: data) } catch let failure as BenchFailure where failure.status == 69 {
            throw BenchFailure.unreachable("the push stand-ins' control port does not answer (is `tools/push run` still running?): \(failure.description)")
        }
    }
}

/// A subscription at the Web Push stand-in: what a registration's body carries.
struct WebPushSubscription: Decodable, Sendable {
    let id: String
    let endpoint: String
    let p256dh: String
    let auth: String
}
