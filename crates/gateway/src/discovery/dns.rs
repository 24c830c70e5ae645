//! DNS discovery through hickory's resolver: SRV targets or A/AAAA
//! addresses, each lookup bounded, nothing cached.
