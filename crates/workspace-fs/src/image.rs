//! `view_image`: a workspace image, resized to fit when asked, as bytes for
//! one MCP image content block.

use std::io::{Cursor, Read};

use image::{ImageFormat, ImageReader};

use crate::error::FsError;
use crate::path::{Kind, Workspace, WorkspacePath};

/// Largest file `view_image` will read at all (decoding costs memory).
pub const MAX_SOURCE_BYTES: u64 = 64 * 1024 * 1024;
/// Largest image (in pixels per side) it will decode.
const MAX_DECODE_SIDE: u32 = 20_000;
/// The most memory one image read may allocate (40 MP of RGBA is 160 MB).
const MAX_DECODE_ALLOC: u64 = 256 * 1024 * 1024;
/// Most pixels it will decode (to resize): 40 megapixels, about 160 MB of
/// RGBA. Checked from the header before anything is decoded: a 1 MB PNG
/// can claim 16000x16000 and cost a gigabyte.
pub const MAX_DECODE_PIXELS: u64 = 40_000_000;

/// A `view_image` request; [`Default`] returns at most 5 MiB and
/// 2000x2000 pixels, resizing larger images.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ImageRequest {
    /// Most bytes returned.
    pub max_bytes: usize,
    /// Widest image returned.
    pub max_width: u32,
    /// Tallest image returned.
    pub max_height: u32,
    /// Shrink images over the limits instead of refusing them.
    pub auto_resize: bool,
}

impl Default for ImageRequest {
    fn default() -> Self {
        Self {
            max_bytes: 5 * 1024 * 1024,
            max_width: 2_000,
            max_height: 2_000,
            auto_resize: true,
        }
    }
}

/// What `view_image` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageOutcome {
    /// MIME type of `data`.
    pub media_type: &'static str,
    /// The encoded image.
    pub data: Vec<u8>,
    /// MIME type of the file on disk.
    pub original_media_type: &'static str,
    /// Size of the file on disk.
    pub original_bytes: u64,
    /// Dimensions of the file.
    pub original_width: u32,
    /// Dimensions of the file.
    pub original_height: u32,
    /// Dimensions of `data`.
    pub width: u32,
    /// Dimensions of `data`.
    pub height: u32,
    /// `data` was re-encoded at a smaller size.
    pub resized: bool,
    /// What resizing changed besides the size.
    pub warnings: Vec<ImageWarning>,
}

/// What resizing an image changed besides its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageWarning {
    /// An animated GIF keeps only its first frame.
    FirstFrameOnly,
    /// The image was re-encoded in another format.
    Reencoded {
        /// MIME type of the file.
        from: &'static str,
        /// MIME type returned.
        to: &'static str,
    },
}

fn mime(f: ImageFormat) -> Option<&'static str> {
    match f {
        ImageFormat::Png => Some("image/png"),
        ImageFormat::Jpeg => Some("image/jpeg"),
        ImageFormat::Gif => Some("image/gif"),
        ImageFormat::WebP => Some("image/webp"),
        _ => None,
    }
}

/// Loads `path` as an image within `req`.
pub fn view_image(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &ImageRequest,
) -> Result<ImageOutcome, FsError> {
    let shown = path.as_given().to_owned();
    let (file, kind) = ws.open_beneath(path)?;
    match kind {
        Kind::File => {}
        Kind::Directory => return Err(FsError::IsDirectory(shown)),
        Kind::Other => return Err(FsError::NotRegular(shown)),
    }
    let size = file.metadata().map_err(|e| FsError::io(&shown, e))?.len();
    if size > MAX_SOURCE_BYTES {
        return Err(FsError::ImageTooLarge {
            path: shown,
            reason: format!(
                "the file is {size} bytes; view_image reads at most {MAX_SOURCE_BYTES}"
            ),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FsError::io(&shown, e))?;
    let not_image = |reason: String| FsError::NotAnImage {
        path: shown.clone(),
        reason,
    };
    let format =
        image::guess_format(&bytes).map_err(|_| not_image("unrecognised content".into()))?;
    let media_type = mime(format)
        .ok_or_else(|| not_image(format!("{format:?} is not PNG, JPEG, GIF or WebP")))?;
    // Every read keeps the allocation bound: a header read decompresses
    // metadata too (a PNG's iCCP chunk), and zeros deflate 1000:1.
    let limited = |side: Option<u32>| {
        let mut r = ImageReader::with_format(Cursor::new(&bytes), format);
        let mut limits = image::Limits::default();
        limits.max_image_width = side;
        limits.max_image_height = side;
        limits.max_alloc = Some(MAX_DECODE_ALLOC);
        r.limits(limits);
        r
    };
    let reader = || limited(Some(MAX_DECODE_SIDE));
    // Past the decoder's limits (a side over MAX_DECODE_SIDE, or more memory
    // than 40 MP of RGBA, as a 16-bit image needs): the documented refusal,
    // not "not an image".
    let too_many_pixels = |width: u32, height: u32| FsError::ImageTooManyPixels {
        path: shown.clone(),
        width,
        height,
        max: MAX_DECODE_PIXELS,
    };
    let (w, h) = reader().into_dimensions().map_err(|e| match e {
        image::ImageError::Limits(_) => {
            // The header is read again without the side limit, to name
            // the size; the allocation bound stays (0x0 when even that fails).
            let (w, h) = limited(None).into_dimensions().unwrap_or((0, 0));
            too_many_pixels(w, h)
        }
        e => not_image(e.to_string()),
    })?;
    let fits = bytes.len() <= req.max_bytes && w <= req.max_width && h <= req.max_height;
    if fits {
        return Ok(ImageOutcome {
            media_type,
            original_media_type: media_type,
            original_bytes: size,
            data: bytes,
            original_width: w,
            original_height: h,
            width: w,
            height: h,
            resized: false,
            warnings: Vec::new(),
        });
    }
    if !req.auto_resize {
        return Err(FsError::ImageTooLarge {
            path: shown,
            reason: format!(
                "{w}x{h}, {} bytes exceeds max_width {} / max_height {} / max_bytes {}; pass auto_resize=true or raise the limits",
                bytes.len(),
                req.max_width,
                req.max_height,
                req.max_bytes
            ),
        });
    }
    let pixels = u64::from(w) * u64::from(h);
    if pixels > MAX_DECODE_PIXELS {
        return Err(FsError::ImageTooManyPixels {
            path: shown,
            width: w,
            height: h,
            max: MAX_DECODE_PIXELS,
        });
    }
    let decoded = reader().decode().map_err(|e| match e {
        image::ImageError::Limits(_) => too_many_pixels(w, h),
        e => not_image(e.to_string()),
    })?;
    let mut warnings = Vec::new();
    if format == ImageFormat::Gif {
        warnings.push(ImageWarning::FirstFrameOnly);
    }
    // JPEG stays JPEG; everything else becomes PNG (lossless, universally shown).
    let (out_format, out_mime) = if format == ImageFormat::Jpeg {
        (ImageFormat::Jpeg, "image/jpeg")
    } else {
        (ImageFormat::Png, "image/png")
    };
    if out_mime != media_type {
        warnings.push(ImageWarning::Reencoded {
            from: media_type,
            to: out_mime,
        });
    }
    let (mut tw, mut th) = (req.max_width.min(w), req.max_height.min(h));
    for _ in 0..8 {
        let small = decoded.thumbnail(tw.max(1), th.max(1));
        let mut data = Vec::new();
        let encoded = if out_format == ImageFormat::Jpeg {
            small
                .to_rgb8()
                .write_to(&mut Cursor::new(&mut data), out_format)
        } else {
            small.write_to(&mut Cursor::new(&mut data), out_format)
        };
        encoded.map_err(|e| not_image(e.to_string()))?;
        if data.len() <= req.max_bytes {
            return Ok(ImageOutcome {
                media_type: out_mime,
                original_media_type: media_type,
                data,
                original_bytes: size,
                original_width: w,
                original_height: h,
                width: small.width(),
                height: small.height(),
                resized: true,
                warnings,
            });
        }
        tw = tw * 3 / 4;
        th = th * 3 / 4;
    }
    Err(FsError::ImageTooLarge {
        path: shown,
        reason: format!("could not shrink it under max_bytes {}", req.max_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 7])
        });
        let mut out = Vec::new();
        image::DynamicImage::ImageRgb8(img)
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    fn setup(name: &str, bytes: &[u8]) -> (tempfile::TempDir, Workspace, WorkspacePath) {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join(name), bytes).unwrap();
        let w = Workspace::open(t.path()).unwrap();
        let p = w.resolve_lexically(name).unwrap();
        (t, w, p)
    }

    const REQ: ImageRequest = ImageRequest {
        max_bytes: 5 * 1024 * 1024,
        max_width: 2000,
        max_height: 2000,
        auto_resize: true,
    };

    #[test]
    fn small_images_pass_through() {
        let bytes = png(10, 20);
        let (_t, w, p) = setup("a.png", &bytes);
        let o = view_image(&w, &p, &REQ).unwrap();
        assert_eq!(
            (o.media_type, o.width, o.height, o.resized),
            ("image/png", 10, 20, false)
        );
        assert_eq!(o.data, bytes);
    }

    #[test]
    fn large_images_resize_or_refuse() {
        let (_t, w, p) = setup("big.png", &png(300, 100));
        let small = ImageRequest {
            max_width: 60,
            max_height: 60,
            ..REQ
        };
        let o = view_image(&w, &p, &small).unwrap();
        assert!(o.resized);
        assert_eq!((o.width, o.height, o.original_width), (60, 20, 300));
        let strict = ImageRequest {
            auto_resize: false,
            ..small
        };
        assert!(matches!(
            view_image(&w, &p, &strict),
            Err(FsError::ImageTooLarge { .. })
        ));
    }

    /// A 16-bit image under the pixel bound still needs more memory than the
    /// decoder allows: the documented refusal, not "not an image".
    // See: target/attack-issue17.md L5
    #[test]
    fn sixteen_bit_images_past_the_memory_limit_are_too_many_pixels() {
        let img = image::ImageBuffer::<image::Rgba<u16>, Vec<u16>>::new(6300, 6300);
        let mut bytes = Vec::new();
        image::DynamicImage::ImageRgba16(img)
            .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
            .unwrap();
        let (_t, w, p) = setup("deep.png", &bytes);
        let small = ImageRequest {
            max_width: 100,
            max_height: 100,
            ..REQ
        };
        match view_image(&w, &p, &small) {
            Err(FsError::ImageTooManyPixels {
                width, height, max, ..
            }) => assert_eq!((width, height, max), (6300, 6300, MAX_DECODE_PIXELS)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_images_are_refused() {
        let (_t, w, p) = setup("a.txt", b"hello, not an image");
        assert!(matches!(
            view_image(&w, &p, &REQ),
            Err(FsError::NotAnImage { .. })
        ));
        let (_t, w, p) = setup("trunc.png", &png(10, 10)[..30]);
        assert!(matches!(
            view_image(&w, &p, &REQ),
            Err(FsError::NotAnImage { .. })
        ));
    }
}
