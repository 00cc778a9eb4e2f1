"""The local world the demo and the tests share: a loopback registry with debootstrapped
Debian base images, a wheel index on 127.0.0.1, and the CPU recipe. Not part of the
installed package."""
