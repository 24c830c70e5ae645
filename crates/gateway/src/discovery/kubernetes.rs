//! Kubernetes discovery: a service's EndpointSlices listed and watched
//! through kube's client and watcher.
