//! S3-compatible object storage (AWS S3, MinIO, …) through aws-sdk-s3.
//!
//! Endpoint, region and credentials come from the standard AWS environment and config files
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, …). With a custom
//! endpoint, path-style addressing is used, as most S3-compatible servers expect.

use anyhow::Context as _;
use async_trait::async_trait;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;

use super::Archive;

#[derive(Debug, Clone)]
pub struct S3Archive {
    client: Client,
    bucket: String,
    endpoint: Option<String>,
}

impl S3Archive {
    /// Configured from the standard AWS environment and config files.
    pub async fn from_env(bucket: &str) -> anyhow::Result<Self> {
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .load()
            .await;
        Ok(Self::from_config(&shared, bucket))
    }

    pub fn from_config(shared: &aws_config::SdkConfig, bucket: &str) -> Self {
        let endpoint = shared.endpoint_url().map(str::to_owned);
        let mut conf = aws_sdk_s3::config::Builder::from(shared);
        if endpoint.is_some() {
            conf = conf.force_path_style(true);
        }
        Self {
            client: Client::from_conf(conf.build()),
            bucket: bucket.to_owned(),
            endpoint,
        }
    }
}

/// An SDK error in one line, with the service's code when there is one.
fn explain<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: &aws_sdk_s3::error::SdkError<E, R>,
) -> String {
    match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or("no message")),
        None => DisplayErrorContext(e).to_string(),
    }
}

#[async_trait]
impl Archive for S3Archive {
    fn describe(&self) -> String {
        match &self.endpoint {
            Some(ep) => format!("s3://{} at {ep}", self.bucket),
            None => format!("s3://{}", self.bucket),
        }
    }

    async fn check(&self) -> anyhow::Result<()> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            // No answer at all: the store may just be down. Uploads wait in the outbox and are
            // retried, so this is not a reason to refuse to start.
            Err(e) if e.raw_response().is_none() => {
                tracing::warn!(archive = %self.describe(), error = %explain(&e), "object store unreachable at start; uploads will be retried");
                Ok(())
            }
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                let why = match status {
                    Some(404) => format!("bucket {:?} does not exist", self.bucket),
                    Some(403) | Some(401) => format!("access to bucket {:?} denied: check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE)", self.bucket),
                    Some(301) => format!("bucket {:?} is in another region: set AWS_REGION", self.bucket),
                    _ => format!("cannot reach bucket {:?}: {}", self.bucket, explain(&e)),
                };
                anyhow::bail!("archive {}: {why}", self.describe())
            }
        }
    }

    async fn put(&self, key: &str, body: &[u8], sha256: &str) -> anyhow::Result<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .metadata("sha256", sha256)
            .body(ByteStream::from(body.to_vec()))
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", explain(&e)))
            .with_context(|| format!("failed to upload {key} to {}", self.describe()))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => {
                let bytes = out
                    .body
                    .collect()
                    .await
                    .with_context(|| format!("failed to read {key}"))?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => Ok(None),
            Err(e) => Err(anyhow::anyhow!("{}", explain(&e)))
                .with_context(|| format!("failed to read {key} from {}", self.describe())),
        }
    }
}
