//! Heatmaps: `attnc plot` and `attnc run --plot`, checked by decoding the image.

use attnc::plot::{self, Layout, PlotOptions};
use attnc::runtime::files::TensorFile;
use attnc::runtime::Tensor;
use std::path::{Path, PathBuf};

mod common;
use common::{attnc, stderr};

const FIXTURE: [&str; 8] = [
    "--weights",
    "tests/fixtures/weights_pad_b2_n7_d16_h4.safetensors",
    "--inputs",
    "tests/fixtures/inputs_pad_b2_n7_d16_h4.safetensors",
    "--dim",
    "D=16",
    "--dim",
    "H=4",
];

/// A path in the temporary folder, unique to this test process and `name`.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("attnc-plot-{}-{name}", std::process::id()))
}

/// The decoded PNG: width, height, RGB bytes.
fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::fs::File::open(path).expect("the PNG exists"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("one frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn pixel((w, _, rgb): &(u32, u32, Vec<u8>), (x, y): (u32, u32)) -> [u8; 3] {
    let i = (y * w + x) as usize * 3;
    [rgb[i], rgb[i + 1], rgb[i + 2]]
}

/// The middle pixel of a cell.
fn centre(layout: &Layout, k: usize, row: usize, col: usize) -> (u32, u32) {
    let (x, y) = layout.cell_at(k, row, col);
    (x + layout.cell / 2, y + layout.cell / 2)
}

fn rgb(c: plotters::style::RGBColor) -> [u8; 3] {
    [c.0, c.1, c.2]
}

fn read(path: &Path, name: &str) -> Tensor {
    let file = TensorFile::open(path).unwrap();
    file.get(name)
        .and_then(|e| e.tensor)
        .expect("the tensor is in the file")
}

#[test]
fn a_run_draws_each_head_of_one_batch_element_with_masked_keys_at_zero() {
    let (png, out) = (temp("run.png"), temp("run.safetensors"));
    let (png_arg, out_arg) = (format!("attn={}", png.display()), out.display().to_string());
    let args = [&["run", "examples/mha.attn"][..], &FIXTURE, &["--batch", "1"]].concat();
    let o = attnc(&[&args[..], &["--plot", &png_arg, "-o", &out_arg]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let image = decode(&png);
    let attn = read(&out, "attn");
    let mask = read(Path::new(&FIXTURE[3]), "mask");
    std::fs::remove_file(&png).unwrap();
    std::fs::remove_file(&out).unwrap();

    let opts = PlotOptions {
        batch: 1,
        ..PlotOptions::default()
    };
    let maps = plot::select(&attn, "attn", &opts).unwrap();
    let layout = Layout::new(&maps, &opts);
    assert_eq!((image.0, image.1), layout.size);
    assert_eq!(maps.heads, 0..4);
    let range = maps.range();
    assert_eq!(range.0, 0.0);
    // Batch element 1 of the fixture masks its last keys: mask is [B, 1, M].
    let m = maps.m;
    let masked: Vec<usize> = (0..m).filter(|&j| mask.data[m + j] == 0.0).collect();
    assert!(
        !masked.is_empty() && masked.len() < m,
        "the fixture masks some keys: {masked:?}"
    );
    let zero = rgb(plot::colour(0.0, range));
    for k in 0..4 {
        for row in 0..maps.n {
            for col in 0..m {
                let want = match masked.contains(&col) {
                    true => zero,
                    false => rgb(plot::colour(maps.value(k, row, col), range)),
                };
                assert_eq!(
                    pixel(&image, centre(&layout, k, row, col)),
                    want,
                    "head {k} ({row}, {col})"
                );
            }
        }
    }
    // The largest probability is drawn in the top colour of the scale, and it is not zero's.
    assert_ne!(rgb(plot::colour(range.1, range)), zero);
}

#[test]
fn plot_reads_a_saved_output_and_selects_heads_with_labels() {
    let (out, png) = (temp("sel.safetensors"), temp("sel.png"));
    let tokens = temp("tokens.txt");
    std::fs::write(&tokens, "the\ncat\nsat\non\nthe\nmat\n.\n").unwrap();
    let run = [
        &["run", "examples/mha.attn"][..],
        &FIXTURE,
        &["-o", out.to_str().unwrap()],
    ]
    .concat();
    assert_eq!(attnc(&run).status.code(), Some(0));
    let o = attnc(&[
        "plot",
        out.to_str().unwrap(),
        "--tensor",
        "attn",
        "-o",
        png.to_str().unwrap(),
        "--heads",
        "1..3",
        "--labels",
        tokens.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let image = decode(&png);
    let attn = read(&out, "attn");
    for f in [&out, &png, &tokens] {
        std::fs::remove_file(f).unwrap();
    }
    let labels: Vec<String> = ["the", "cat", "sat", "on", "the", "mat", "."]
        .map(String::from)
        .to_vec();
    let opts = PlotOptions {
        heads: Some(1..3),
        queries: Some(labels),
        ..PlotOptions::default()
    };
    let maps = plot::select(&attn, "attn", &opts).unwrap();
    let layout = Layout::new(&maps, &opts);
    assert_eq!((image.0, image.1), layout.size);
    // The first drawn map is head 1 of batch element 0.
    let want = rgb(plot::colour(attn.data[7 * 7 + 2 * 7 + 3], maps.range()));
    assert_eq!(pixel(&image, centre(&layout, 0, 2, 3)), want);
}

#[test]
fn an_svg_has_a_rectangle_per_cell_and_the_titles() {
    let t = Tensor::new(vec![1, 2, 3, 4], (0..24).map(|i| i as f32 / 24.0).collect());
    let path = temp("t.svg");
    let opts = PlotOptions::default();
    let maps = plot::select(&t, "p", &opts).unwrap();
    plot::save(&maps, "p", &opts, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.contains("p[0, 0]") && svg.contains("p[0, 1]"));
    assert!(svg.matches("<rect").count() >= 2 * 3 * 4);
}

#[test]
fn what_cannot_be_drawn_is_an_error_naming_the_tensor() {
    let t = Tensor::new(vec![2, 1, 3, 3], vec![0.5; 18]);
    let error = |opts: PlotOptions| plot::select(&t, "attn", &opts).err().unwrap().to_string();
    let batch = error(PlotOptions {
        batch: 2,
        ..PlotOptions::default()
    });
    assert!(batch.contains("`attn` has 2 batch elements"), "{batch}");
    let heads = error(PlotOptions {
        heads: Some(0..2),
        ..PlotOptions::default()
    });
    assert!(heads.contains("`attn` has 1 heads"), "{heads}");
    let labels = error(PlotOptions {
        queries: Some(vec!["a".into()]),
        ..PlotOptions::default()
    });
    assert!(labels.contains("1 labels for `attn`'s 3 queries"), "{labels}");
    let big = Tensor::new(vec![1, 2048, 2049], vec![0.0; 2048 * 2049]);
    let too_many = plot::select(&big, "big", &PlotOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(too_many.contains("more than the"), "{too_many}");
    let scalar = Tensor::new(vec![3], vec![0.0; 3]);
    assert!(plot::select(&scalar, "s", &PlotOptions::default()).is_err());
    // No queries, not no batch elements.
    let empty = Tensor::new(vec![1, 0, 3], Vec::new());
    let empty = plot::select(&empty, "z", &PlotOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(empty.contains("`z` has shape [1, 0, 3], no elements"), "{empty}");
    let maps = plot::select(&t, "attn", &PlotOptions::default()).unwrap();
    let gif = plot::save(&maps, "attn", &PlotOptions::default(), &temp("x.gif"));
    assert!(gif.err().unwrap().to_string().contains(".png or an .svg"));
    let o = attnc(
        &[
            &["run", "examples/mha.attn"][..],
            &FIXTURE,
            &["--plot", "nope=x.png"],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no output `nope`"), "{}", stderr(&o));
}

/// A fully masked row under `-inf` is NaN in PyTorch: it is drawn grey, named in the
/// legend, and infinities sit at the ends of the scale of the finite values.
#[test]
fn nan_cells_are_grey_and_infinities_clamp_to_the_scale() {
    let mut data: Vec<f32> = (0..9).map(|i| i as f32 / 8.0).collect();
    data[1] = f32::NAN;
    data[3] = f32::INFINITY;
    data[5] = f32::NEG_INFINITY;
    let t = Tensor::new(vec![1, 3, 3], data);
    let opts = PlotOptions::default();
    let maps = plot::select(&t, "attn", &opts).unwrap();
    let range = maps.range();
    assert_eq!(range, (0.0, 1.0));
    let layout = Layout::new(&maps, &opts);
    assert!(layout.nan.is_some(), "the legend names NaN's colour");
    let (png, svg) = (temp("nan.png"), temp("nan.svg"));
    plot::save(&maps, "attn", &opts, &png).unwrap();
    plot::save(&maps, "attn", &opts, &svg).unwrap();
    let image = decode(&png);
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&png).unwrap();
    std::fs::remove_file(&svg).unwrap();
    assert_eq!((image.0, image.1), layout.size);
    assert_eq!(pixel(&image, centre(&layout, 0, 0, 1)), rgb(plot::NAN_COLOUR));
    assert_eq!(
        pixel(&image, centre(&layout, 0, 1, 0)),
        rgb(plot::colour(range.1, range))
    );
    assert_eq!(
        pixel(&image, centre(&layout, 0, 1, 2)),
        rgb(plot::colour(range.0, range))
    );
    let (x, y) = layout.nan.unwrap();
    assert_eq!(pixel(&image, (x + 2, y + 2)), rgb(plot::NAN_COLOUR));
    assert!(text.contains("NaN"), "the legend says NaN");
    let all_nan = Tensor::new(vec![1, 2, 2], vec![f32::NAN; 4]);
    let maps = plot::select(&all_nan, "attn", &opts).unwrap();
    plot::save(&maps, "attn", &opts, &png).unwrap();
    std::fs::remove_file(&png).unwrap();
}

/// `run --plot` and its flags are checked before anything is compiled or run: nothing is
/// printed to stdout (no output's checksum), and the error names the file or the output.
#[test]
fn plot_options_are_checked_before_the_run() {
    let run = |extra: &[&str]| attnc(&[&["run", "examples/mha.attn"][..], &FIXTURE, extra].concat());
    let jpg = run(&["--plot", "attn=a.jpg"]);
    assert_eq!(jpg.status.code(), Some(2), "a usage error");
    assert!(
        stderr(&jpg).contains("`a.jpg`: a plot is a .png or an .svg file"),
        "{}",
        stderr(&jpg)
    );
    let empty = run(&["--plot", "attn=a.png", "--heads", "3..3"]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(stderr(&empty).contains("selects no head"), "{}", stderr(&empty));
    let path = temp("too_many_heads.png");
    let heads = run(&["--plot", &format!("attn={}", path.display()), "--heads", "2..9"]);
    assert_eq!(heads.status.code(), Some(1));
    assert!(
        stderr(&heads).contains("`attn` has 4 heads"),
        "{}",
        stderr(&heads)
    );
    assert!(
        heads.stdout.is_empty(),
        "ran anyway: {}",
        String::from_utf8_lossy(&heads.stdout)
    );
    assert!(!path.exists());
    let nope = run(&["--plot", "nope=x.png"]);
    assert_eq!(nope.status.code(), Some(1));
    assert!(
        stderr(&nope).contains("no output `nope` (it has `out`, `attn`)"),
        "{}",
        stderr(&nope)
    );
    assert!(nope.stdout.is_empty());
}

/// The axes are titled as PyTorch's attention weights are read, and a negative colour-bar
/// label has a minus sign as wide as a digit (U+2212, as matplotlib writes it), where a
/// hyphen stood apart from the digits in a PNG.
#[test]
fn axes_are_titled_and_negative_labels_keep_their_minus() {
    let t = Tensor::new(vec![1, 2, 3], vec![-0.5, 0.25, 1.0, 0.0, 0.5, -0.25]);
    let opts = PlotOptions::default();
    let maps = plot::select(&t, "s", &opts).unwrap();
    let path = temp("titles.svg");
    plot::save(&maps, "s", &opts, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.contains("\nquery\n") && svg.contains("\nkey\n"), "{svg}");
    assert!(svg.contains("\n\u{2212}0.500\n"), "{svg}");
    assert!(!svg.contains("-0.500"), "{svg}");
}
