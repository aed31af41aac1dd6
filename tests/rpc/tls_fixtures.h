// Test-only TLS material for tests/rpc: a throw-away CA, a server certificate for
// localhost/127.0.0.1 and a client certificate, all signed by that CA, ECDSA P-256, valid
// 2020-01-01 to 2126-01-01. Generated once with openssl and embedded so the tests need no
// openssl binary at run time. Never use these outside tests. Regenerate with:
//
//   openssl ecparam -name prime256v1 -genkey -noout -out ca.key   (likewise server, client;
//     the leaf keys through `openssl pkcs8 -topk8 -nocrypt`)
//   openssl req -new -key X.key -subj "/CN=..." -out X.csr
//   openssl ca -batch -config ca.cnf [-selfsign] -startdate 20200101000000Z
//     -enddate 21260101000000Z -extensions {ca_ext|server_ext|client_ext} -notext ...
//   with server_ext: subjectAltName=DNS:localhost,IP:127.0.0.1, extendedKeyUsage=serverAuth;
//   client_ext: extendedKeyUsage=clientAuth; ca_ext: basicConstraints=critical,CA:TRUE.
#ifndef SCD_TESTS_RPC_TLS_FIXTURES_H_
#define SCD_TESTS_RPC_TLS_FIXTURES_H_

namespace scd::rpc::testing {

inline constexpr char kTestCaPem[] = R"pem(-----BEGIN CERTIFICATE-----
MIIBbDCCARKgAwIBAgICEAAwCgYIKoZIzj0EAwIwHDEaMBgGA1UEAwwRU0NELVNl
cnZlIFRlc3QgQ0EwIBcNMjAwMTAxMDAwMDAwWhgPMjEyNjAxMDEwMDAwMDBaMBwx
GjAYBgNVBAMMEVNDRC1TZXJ2ZSBUZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEWekGL76XU40eMTg9+Ta6TZ7RrTibBycAbNy2+bu2oGOao7+nJETVPzl/
b1J2JquGckQi0WA+rI2lE56A7ZcaR6NCMEAwDwYDVR0TAQH/BAUwAwEB/zAOBgNV
HQ8BAf8EBAMCAQYwHQYDVR0OBBYEFIfFLZ5Pjl3sA2Q4BE46oCoHfqXUMAoGCCqG
SM49BAMCA0gAMEUCIQCsg7A3tdT6swu5dvuBJUlbza5k7Wfcx++/DeuCc4MlPAIg
f+Zv1d0DEQYD6xyvL2f0LqG4CbqzFfcCJjnm4tQhcmI=
-----END CERTIFICATE-----
)pem";

inline constexpr char kTestServerCertPem[] = R"pem(-----BEGIN CERTIFICATE-----
MIIBrzCCAVWgAwIBAgICEAEwCgYIKoZIzj0EAwIwHDEaMBgGA1UEAwwRU0NELVNl
cnZlIFRlc3QgQ0EwIBcNMjAwMTAxMDAwMDAwWhgPMjEyNjAxMDEwMDAwMDBaMBQx
EjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABLHX
xntELKYU14mTcCI31N4gE5UEO1Acq3R0izg8URgQ/OtRtS/R3wQ0LJw12cihWNQ7
D0qv5dGMRKMY2uUYV4GjgYwwgYkwGgYDVR0RBBMwEYIJbG9jYWxob3N0hwR/AAAB
MAkGA1UdEwQCMAAwCwYDVR0PBAQDAgWgMBMGA1UdJQQMMAoGCCsGAQUFBwMBMB0G
A1UdDgQWBBRRAMDCVTJfECzRBw8Hfe1XgVIaIjAfBgNVHSMEGDAWgBSHxS2eT45d
7ANkOAROOqAqB36l1DAKBggqhkjOPQQDAgNIADBFAiB5nPDdwo4L4zVSEk4IY6di
fgVUiEKY3cUWOn3bVhtAkgIhALRLpEJzSq4qUs/X0DROq8zbHgD2USOAj/YiPmY6
Mgp9
-----END CERTIFICATE-----
)pem";

inline constexpr char kTestServerKeyPem[] = R"pem(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgIXb9RMmHux+5ZhvG
dtaaFE0Uj2lYULOtYT/80yDSHtOhRANCAASx18Z7RCymFNeJk3AiN9TeIBOVBDtQ
HKt0dIs4PFEYEPzrUbUv0d8ENCycNdnIoVjUOw9Kr+XRjESjGNrlGFeB
-----END PRIVATE KEY-----
)pem";

inline constexpr char kTestClientCertPem[] = R"pem(-----BEGIN CERTIFICATE-----
MIIBkzCCATmgAwIBAgICEAIwCgYIKoZIzj0EAwIwHDEaMBgGA1UEAwwRU0NELVNl
cnZlIFRlc3QgQ0EwIBcNMjAwMTAxMDAwMDAwWhgPMjEyNjAxMDEwMDAwMDBaMBYx
FDASBgNVBAMMC2RlY29kZS10ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
lOD1zZTLzSHp0Z8iGFsV1yr6isBw7HruM9uxDhxbMI23uoO0ar+vXw8coey9Le6O
2wSt1yLmXzHL+g12qn1IR6NvMG0wCQYDVR0TBAIwADALBgNVHQ8EBAMCB4AwEwYD
VR0lBAwwCgYIKwYBBQUHAwIwHQYDVR0OBBYEFNIqp+ul5vplMdGvs0Quu2hO+6VW
MB8GA1UdIwQYMBaAFIfFLZ5Pjl3sA2Q4BE46oCoHfqXUMAoGCCqGSM49BAMCA0gA
MEUCIGqez4oyHKJppcSWl0Tj1K3YGIbvtfywBWUg3BC9A0r3AiEAteouW6l53ccT
nvaCZc+CTHIQhLFI4pMoY0Z0wNo0wAo=
-----END CERTIFICATE-----
)pem";

inline constexpr char kTestClientKeyPem[] = R"pem(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgbhtADOVql0RM2GGO
rrscXIkda2qrsYLp5TsPQ9GG86GhRANCAASU4PXNlMvNIenRnyIYWxXXKvqKwHDs
eu4z27EOHFswjbe6g7Rqv69fDxyh7L0t7o7bBK3XIuZfMcv6DXaqfUhH
-----END PRIVATE KEY-----
)pem";

}  // namespace scd::rpc::testing

#endif  // SCD_TESTS_RPC_TLS_FIXTURES_H_
