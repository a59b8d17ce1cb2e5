import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Loopback ports for tests that need a port number before anything listens on it: a relay
/// process spawned with `--listen 127.0.0.1:PORT`, or a URL that must find nothing listening.
public enum LoopbackPort {
    /// A 127.0.0.1 TCP port free right now: bound to port 0, read back, and closed again, so
    /// nothing listens on it when this returns. Another process may take it before the caller
    /// uses it; a caller that binds it then fails with that process's error (for a spawned relay,
    /// its log), and a caller that wants nothing listening gets a refused connection either way
    /// unless someone else bound it meanwhile.
    public static func unused() throws -> Int {
        let (fd, port) = try boundSocket(purpose: "to find a free port")
        close(fd)
        return port
    }

    /// A 127.0.0.1 TCP port that refuses connections for as long as the returned socket is open:
    /// bound but not listening, so a connect gets a reset and no other test can bind the port
    /// meanwhile (a port merely found free may be taken by another test's server before it is
    /// used). Close it with ``RefusingPort/close()``.
    public static func refusing() throws -> RefusingPort {
        let (fd, port) = try boundSocket(purpose: "for a refusing port")
        return RefusingPort(port: port, descriptor: fd)
    }

    /// A TCP socket bound to 127.0.0.1 on a port the kernel chose, and that port.
    private static func boundSocket(purpose: String) throws -> (descriptor: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestRelayError("cannot open a loopback socket \(purpose) (errno \(errno))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else {
            let failure = errno
            close(fd)
            throw TestRelayError("cannot bind a loopback socket \(purpose) (errno \(failure))")
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}

/// A loopback port held bound and not listening (``LoopbackPort/refusing()``).
public struct RefusingPort: Sendable {
    /// The port number: connections to it are refused until ``close()``.
    public let port: Int
    fileprivate let descriptor: Int32

    /// Gives the port back.
    public func close() { _ = Glibc.close(descriptor) }
}
