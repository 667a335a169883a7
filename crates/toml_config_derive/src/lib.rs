//! `#[derive(TomlConfig)]`: collects the doc comments of a config type so that
//! `shoal_toml_config` can print a commented TOML file from them.
//!
//! * On a struct with named fields, every field becomes a documented key. A field
//!   without a doc comment is a compile error: the generated file is the operator's
//!   manual, so every key must say what it is.
//! * On an enum of unit variants, every variant becomes a documented choice; the
//!   printed value is whatever serde serializes the variant to, so `rename_all`
//!   attributes are respected without this macro having to understand them.
//! * `#[toml_config(about = EXPR)]` on a type replaces its doc comment as the
//!   type's own documentation with a string expression: a generic config type takes
//!   its header from its type parameter.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{Attribute, Data, DeriveInput, Expr, Fields, Lit, Meta, parse_macro_input};

#[proc_macro_derive(TomlConfig, attributes(toml_config))]
pub fn derive_toml_config(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let plain_doc = doc_comment(&input.attrs);
    let type_doc = match about(&input.attrs)? {
        Some(expr) => quote! { ::std::borrow::Cow::Owned(::std::string::String::from(#expr)) },
        None => {
            let doc = doc_comment(&input.attrs);
            quote! { ::std::borrow::Cow::Borrowed(#doc) }
        }
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();

    let body = match &input.data {
        Data::Struct(data) => {
            let Fields::Named(fields) = &data.fields else {
                return Err(syn::Error::new_spanned(
                    name,
                    "TomlConfig can only be derived for structs with named fields",
                ));
            };
            let mut entries = Vec::new();
            for field in &fields.named {
                let ident = field.ident.as_ref().expect("named field");
                let doc = doc_comment(&field.attrs);
                if doc.is_empty() {
                    return Err(syn::Error::new_spanned(
                        ident,
                        "every config field needs a doc comment: it becomes the comment in the \
                         generated TOML",
                    ));
                }
                let key = ident.to_string();
                let ty = &field.ty;
                entries.push(quote! {
                    ::shoal_toml_config::FieldDoc {
                        key: #key,
                        doc: #doc,
                        docs: <#ty as ::shoal_toml_config::TomlConfig>::docs(),
                    }
                });
            }
            quote! {
                ::shoal_toml_config::Docs::Struct {
                    doc: #type_doc,
                    fields: ::std::vec![#(#entries),*],
                }
            }
        }
        Data::Enum(data) => {
            let mut choices = Vec::new();
            for variant in &data.variants {
                if !matches!(variant.fields, Fields::Unit) {
                    return Err(syn::Error::new_spanned(
                        &variant.ident,
                        "TomlConfig can only be derived for enums whose variants carry no data",
                    ));
                }
                let ident = &variant.ident;
                let doc = doc_comment(&variant.attrs);
                choices.push(quote! {
                    ::shoal_toml_config::ChoiceDoc {
                        value: ::shoal_toml_config::serialized_name(&#name::#ident),
                        doc: #doc,
                    }
                });
            }
            quote! {
                ::shoal_toml_config::Docs::Choice {
                    doc: #plain_doc,
                    choices: ::std::vec![#(#choices),*],
                }
            }
        }
        Data::Union(_) => {
            return Err(syn::Error::new_spanned(
                name,
                "TomlConfig cannot be derived for unions",
            ));
        }
    };

    Ok(quote! {
        impl #impl_generics ::shoal_toml_config::TomlConfig for #name #ty_generics #where_clause {
            fn docs() -> ::shoal_toml_config::Docs {
                #body
            }
        }
    })
}

/// The expression of a `#[toml_config(about = EXPR)]` attribute, if there is one.
fn about(attrs: &[Attribute]) -> syn::Result<Option<Expr>> {
    let mut found = None;
    for attr in attrs {
        if !attr.path().is_ident("toml_config") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("about") {
                found = Some(meta.value()?.parse::<Expr>()?);
                Ok(())
            } else {
                Err(meta.error("expected `about = EXPR`"))
            }
        })?;
    }
    Ok(found)
}

/// Joins the `///` lines of an item, dropping the single space rustdoc puts after `///`.
fn doc_comment(attrs: &[Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let Meta::NameValue(meta) = &attr.meta
            && let Expr::Lit(expr) = &meta.value
            && let Lit::Str(text) = &expr.lit
        {
            let line = text.value();
            lines.push(
                line.strip_prefix(' ')
                    .unwrap_or(&line)
                    .trim_end()
                    .to_string(),
            );
        }
    }
    lines.join("\n").trim().to_string()
}
